//! The hybrid session's hook ([`HybridHook`]): what the verified ticks carried, for the App.

use bevy::prelude::*;
use simsync_deterministic::{HookFlow, SimInput, Tick, VerifiedTick, VerifiedTickHook};

use super::HybridConfig;
use super::pose::{HybridInput, carried_poses};
use super::proxies::is_fresh;

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
        let (carried, ignored) = carried_poses(
            inputs
                .iter()
                .enumerate()
                .map(|(p, input)| (p as u8, &input.props)),
        );
        let (stale, over_pool) = world
            .get_resource::<HybridConfig>()
            .map_or((0, 0), |config| {
                let fresh = carried
                    .iter()
                    .filter(|c| is_fresh(tick - c.stamp, config.max_stale_ticks))
                    .count();
                (
                    carried.len() - fresh,
                    fresh.saturating_sub(usize::from(config.proxy_slots)),
                )
            });
        let mut record = world.get_resource_or_init::<VerifiedProps>();
        record.tick = tick;
        record.stale += stale as u64;
        record.over_pool += over_pool as u64;
        record.carried += carried.len() as u64;
        record.ignored += u64::from(ignored);
        record.ticks_with_props += u64::from(!carried.is_empty());
        record.last = carried.iter().map(|c| (c.pose.id, c.pose.pos_mm)).collect();
        HookFlow::Continue
    }
}
