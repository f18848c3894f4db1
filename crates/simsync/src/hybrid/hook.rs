//! The hybrid session's hook ([`HybridHook`]): what the verified ticks carried, for the App.

use bevy::prelude::*;
use simsync_deterministic::{HookFlow, SimInput, Tick, VerifiedTick, VerifiedTickHook};

use super::HybridConfig;
use super::pose::{HybridInput, carried_poses};

/// What the verified ticks of this App's session carried (main-app resource, written by
/// [`HybridHook`]): the same on every peer, tick for tick.
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq, Reflect)]
#[reflect(Resource)]
pub struct VerifiedProps {
    /// The last verified tick seen.
    pub tick: Tick,
    /// Carried poses the verified ticks applied, in total.
    pub carried: u64,
    /// Poses past [`MAX_PROPS_PER_INPUT`](super::MAX_PROPS_PER_INPUT) in one input, ignored.
    pub ignored: u64,
    /// Carried poses stamped too long before the tick, or after it
    /// ([`HybridConfig::max_stale_ticks`]): not applied.
    pub stale: u64,
    /// Poses of a prop given again in the same input (only a hostile or faulty sender does):
    /// not applied ([`Carried::duplicate`](super::Carried::duplicate)).
    pub duplicate: u64,
    /// Fresh poses of a prop another input of the same tick also carried, that lost to it
    /// ([`Carried::contested`](super::Carried::contested)): an ownership change in flight, a
    /// left player's repeated input, or a player carrying a prop it does not own.
    pub contested: u64,
    /// Applied poses of a shape kind past [`HybridConfig::shapes`]: their proxies took the
    /// first shape.
    pub unknown_kind: u64,
    /// Fresh poses past the pool ([`HybridConfig::proxy_slots`]) in one tick: no proxy stood
    /// for them that tick.
    pub over_pool: u64,
    /// Verified ticks that carried at least one pose.
    pub ticks_with_props: u64,
    /// The props the last verified tick carried, as `(prop, position in mm)`, in the order the
    /// rule applied them.
    pub last: Vec<(u64, [i32; 3])>,
}

/// The hook of a hybrid session (added by [`HybridPlugin`](super::HybridPlugin)): after each
/// verified tick, resolves the tick's carried poses by the same rule the worlds applied
/// ([`carried_poses`]) and records them in [`VerifiedProps`].
#[derive(Debug, Default)]
pub struct HybridHook;

impl<I: SimInput> VerifiedTickHook<HybridInput<I>> for HybridHook {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, HybridInput<I>>) -> HookFlow {
        let tick = verified.tick();
        let (inputs, world) = verified.inputs_and_app_world();
        let config = world
            .get_resource::<HybridConfig>()
            .cloned()
            .unwrap_or_default();
        let props = inputs
            .iter()
            .enumerate()
            .map(|(p, input)| (p as u8, &input.props));
        let carried = carried_poses(tick, config.max_stale_ticks, props);
        let kinds = config.shapes.len().max(1);
        let unknown_kind = carried
            .poses
            .iter()
            .filter(|c| usize::from(c.pose.kind) >= kinds)
            .count();
        let over_pool = carried
            .poses
            .len()
            .saturating_sub(usize::from(config.proxy_slots));
        let mut record = world.get_resource_or_init::<VerifiedProps>();
        record.tick = tick;
        record.stale += u64::from(carried.stale);
        record.duplicate += u64::from(carried.duplicate);
        record.contested += u64::from(carried.contested);
        record.unknown_kind += unknown_kind as u64;
        record.over_pool += over_pool as u64;
        record.carried += carried.poses.len() as u64;
        record.ignored += u64::from(carried.ignored);
        record.ticks_with_props += u64::from(!carried.poses.is_empty());
        record.last = carried
            .poses
            .iter()
            .map(|c| (c.pose.id, c.pose.pos_mm))
            .collect();
        HookFlow::Continue
    }
}
