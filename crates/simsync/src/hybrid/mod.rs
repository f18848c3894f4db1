//! Hybrid sessions: **players** (avatars, game state, rules) under the deterministic rollback
//! session and **props** (loose Rapier bodies) under simulation ownership, in one App, with a
//! rollback whose cost does not grow with the props.
//!
//! - [`RollbackBody`]: a player body, spawned in the simulation worlds (rolled back, hashed,
//!   in snapshots). [`OwnedProp`]: a prop, a body of the App's own world under
//!   [`OwnershipPlugin`](crate::OwnershipPlugin), carried by its owner ([`PropOwnedHere`]).
//! - [`hybrid_session`] makes the session plugin: the game's plugin wrapped in [`HybridGame`],
//!   on the input [`HybridInput<I>`] (the game's input and the owner's [`PropPoses`]).
//!   [`HybridPlugin`], added after it, chooses which owned props each input carries, stamps
//!   them with the input's tick and records what the verified ticks carried ([`HybridHook`],
//!   a hook of the session's seam, into [`VerifiedProps`]).
//! - Players move props ([players move props](#players-move-props)): [`AvatarOf`] marks a
//!   player body as a player's avatar; [`PlayerAvatarsPlugin`] gives each avatar a kinematic
//!   twin in the App's world ([`AvatarCollider`]) at its predicted pose, and holds the props
//!   players grabbed ([`HeldProp`], [`PropGrabCommandsExt`]). [`OwnershipConnection`] and
//!   [`OwnershipConnectionPlugin`] let the App's ownership participant talk to its entity
//!   server beside the session's connection to the relay.
//! - Plain data and pure rules: [`PropPose`] (quantized), [`PropPoses`] (bounded),
//!   [`carried_poses`] (which pose a tick applies), [`advance_proxies`] (the proxy pool),
//!   [`choose_carried`] (what an owner sends).
//!
//! # The rule
//!
//! **Which prop pose a verified tick sees.** The players' worlds never hold the props: they
//! hold a fixed pool of [`HybridConfig::proxy_slots`] kinematic colliders ([`PropProxy`]),
//! each standing for at most one prop. A peer's input for tick `t` carries the poses of the
//! moving props this peer owned when it sent that input, stamped `t` ([`PropPoses`]). Before
//! the game's systems and physics run tick `t`, the pool is moved on by the tick's inputs
//! alone:
//!
//! 1. every proxy standing for a prop moves by its velocity for one tick;
//! 2. the tick's carried poses, resolved in player order (a prop carried by several inputs —
//!    an ownership change in flight, or the repeated last input of a player who left — keeps
//!    the pose with the latest stamp, of equal stamps the lowest player's), each set its prop's
//!    proxy to the pose moved on by its velocity for `t − stamp` ticks; a prop without a proxy
//!    takes the lowest parked slot, else the slot seen longest ago.
//!
//! **Why every peer sees the same one.** A verified tick runs on the confirmed inputs of `t`,
//! which the relay confirmed identically to every peer; the pool is rollback state (in the
//! snapshot and the checksum); the step is integer arithmetic on both. So the verified world
//! of every peer applies the same poses to the same proxies before tick `t`, and its players
//! collide with the same props. A confirmed input carries the stamp `t`, so the verified world
//! takes the owner's pose as it was sent. A **predicted** tick runs on predicted inputs: a
//! remote player's last confirmed input repeated carries an older stamp, so the predicted
//! world sees that prop's latest known pose moved on by its velocity — the same function of
//! the same input values as a verified tick, so a prediction whose inputs held matches the
//! verified state bit for bit.
//!
//! **What the rollback costs.** Props never enter the simulation worlds; the pool's size is
//! the configuration's, whatever number of props the game has. A proxy takes part in the
//! players' physics only within [`HybridConfig::reach`] of a dynamic body of their world (the
//! gap between the bounding spheres of the two colliders, from the positions before the
//! tick's physics, [`within_reach`]); out of reach it waits at its parked spot, touching
//! nothing ([`place`]). Its state ([`PropProxy`]) still moves on every tick, in integers; its
//! collider, written only when its value changes, gives Rapier nothing to update, test or
//! solve. Whether a proxy is in reach is a function of rollback state (the pool and the bodies'
//! transforms), so every peer, and a re-simulation, places it alike. A rollback therefore
//! copies and re-simulates the players, the world and the proxies near them, whatever the
//! number of props: the same physics work with 2,000 props as with 0 while the props stay out
//! of the players' reach, and at most the pool's size more when they crowd around them.
//! Out of reach, a prop is invisible to the players' worlds' queries too (ray casts, sensors).
//! The price is in the inputs: every input carries at most
//! [`HybridConfig::max_props_per_input`] poses (about 30 bytes each on the wire), in turn when more props move than fit
//! ([`choose_carried`]); a moving prop left out is seen moving on by its last carried velocity.
//! A prop that never moved since the session started has no proxy, and one evicted from a
//! full pool is no longer an obstacle for the players until it is carried again.
//!
//! # Players move props
//!
//! The props live in the App's own world, where the App is an ownership participant; the
//! players live in the simulation worlds. A player reaches the props through its avatar's
//! **twin**: every frame, after the session update, each avatar of the predicted world
//! ([`AvatarOf`]) is copied into the App's world as a kinematic collider at its predicted pose
//! ([`AvatarCollider`]). Every App has a twin of every player, so a prop moves the same way
//! wherever a player walks into it, but only the twins of this App's own players are its
//! participant's avatar ([`ParticipantAvatar`](crate::ownership::ParticipantAvatar)):
//!
//! 1. a twin that sets a prop moving makes this participant bid for it at POKE (ownership rule
//!    9; a prop another player's twin pushes is bid for by that player's App);
//! 2. a prop a player grabs ([`PropGrabCommandsExt::grab_prop`]) is bid for at GRAB (ownership
//!    rule 10) and held at a point relative to its twin; a throw
//!    ([`PropGrabCommandsExt::throw_prop`]) ends the grab with a velocity, and the owner keeps
//!    the prop until it rests and releases it (ownership rule 12); a prop the owner's prop hits
//!    is bid for by knock-on (ownership rule 11);
//! 3. the owner simulates the prop, its states reach every other participant (ownership), and
//!    its inputs carry the prop's poses to the players' worlds ([the rule](#the-rule)): so a
//!    prop that hits another player's avatar moves that avatar in every peer's verified world
//!    alike, because the verified worlds see only the carried poses, never the App's world.
//!
//! A proxy pushes a player as a kinematic body does: with the velocity of its move, whatever
//! the prop's mass, and its contacts are looked for along its move before it makes it, so a
//! prop that reaches a player within one tick hits it at its speed rather than only pushing
//! out of the overlap afterwards. In the owner's world the other players' twins are kinematic
//! too: a prop thrown at a player stops or bounces off its twin, and the player, in the
//! players' worlds, takes the prop's speed at the hit. A game wanting lighter hits scales the
//! players' response in its own systems (the players' worlds are the game's).
//!
//! The twins follow the **predicted** world because it is what the player sees and steers:
//! a touch happens where the player's avatar is on its own screen. The twins are no
//! simulation state: a rollback that moves an avatar moves its twin the next frame, and
//! nothing of the App's world flows back into the players' worlds except the carried poses.
//!
//! The session and the ownership participant each have their connection: the relay's is the
//! App's `RenetClient`, the entity server's an [`OwnershipConnection`] swapped in while the
//! ownership systems run ([`OwnershipConnectionPlugin`]).

mod avatar;
mod connection;
mod hook;
mod pose;
mod proxies;
mod sim;
mod source;

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy_rapier3d::prelude::Collider;
use simsync_deterministic::{
    DeterministicPlugin, DeterministicSet, PlayerIndex, SimInput, Tick, VerifiedTickHookAppExt,
};

pub use avatar::{
    AvatarCollider, AvatarOf, AvatarPose, HeldProp, PlayerAvatarsPlugin, PropGrabCommandsExt,
    avatar_poses, hold_velocity,
};
pub use connection::{OwnershipConnection, OwnershipConnectionPlugin};
pub use hook::{HybridHook, VerifiedProps};
pub use pose::{
    CarriedPose, HybridError, HybridInput, MAX_PROPS_PER_INPUT, PropPose, PropPoses, carried_poses,
};
pub use proxies::{
    Placement, PropProxy, ProxyStep, ReachBody, advance_proxies, place, within_reach,
};
pub use sim::{HybridGame, HybridSimSet, RollbackBody};
pub use source::{HybridStats, OwnedPose, OwnedProp, PropOwnedHere, choose_carried};

/// A game's input of `(player, tick)`, for a scripted player ([`HybridPlugin::scripted`]).
pub type ScriptedInput<I> = Arc<dyn Fn(PlayerIndex, Tick) -> I + Send + Sync>;

/// How a hybrid session is set up (a resource of the App and of the simulation worlds): the
/// proxy pool, the props per input, the shapes. Give the same value to [`hybrid_session`] and
/// [`HybridPlugin`], and the same on every peer (the pool is simulation state).
#[derive(Resource, Clone, Debug)]
pub struct HybridConfig {
    /// Proxy colliders in the players' worlds (default 32): how many props the players can
    /// touch at once. The rollback's cost grows with this, not with the props.
    pub proxy_slots: u16,
    /// Poses one input carries at most (default 6; capped at [`MAX_PROPS_PER_INPUT`]). Keep
    /// `max_props_per_input × 30` bytes plus the game's input under the session's input size
    /// cap (256 bytes unless configured).
    pub max_props_per_input: usize,
    /// A carried pose older than this many ticks at the tick that applies it is ignored
    /// (default 32).
    pub max_stale_ticks: Tick,
    /// Speed (m/s) at or below which an owned prop rests and is not carried (default 0.01).
    pub rest_speed: f32,
    /// How near (metres, default 1.0) a prop's proxy must come to a dynamic body of the
    /// players' worlds to take part in their physics: the largest gap between the bounding
    /// spheres of the two colliders. Farther, it waits at its parked spot, touching nothing,
    /// and costs the physics nothing ([the rule](crate::hybrid#the-rule)). A prop
    /// closing on a body faster than `reach × tick_hz / 2` m/s (32 m/s by default) can reach
    /// it before its proxy is solid; `f32::INFINITY` keeps every proxy in the physics.
    pub reach: f32,
    /// The session's tick rate (default 64): a proxy moves `velocity / tick_hz` per tick.
    pub tick_hz: u32,
    /// The proxy shape of each prop kind ([`OwnedProp::kind`]); a kind past the end takes the
    /// first; an empty list a 0.25 m ball (the default).
    pub shapes: Vec<Collider>,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            proxy_slots: 32,
            max_props_per_input: 6,
            max_stale_ticks: 32,
            rest_speed: 0.01,
            reach: 1.0,
            tick_hz: 64,
            shapes: vec![Collider::ball(0.25)],
        }
    }
}

impl HybridConfig {
    /// The proxy shape of `kind` (see [`shapes`](Self::shapes)).
    pub fn shape(&self, kind: u8) -> Collider {
        self.shapes
            .get(usize::from(kind))
            .or(self.shapes.first())
            .cloned()
            .unwrap_or_else(|| Collider::ball(0.25))
    }
}

/// The session plugin of a hybrid game: `DeterministicPlugin<HybridInput<I>>` running `game`
/// wrapped in [`HybridGame`] (the proxy pool and the rule). Configure it like any session
/// plugin (`.config(..)`, `.networked(..)`); add [`HybridPlugin`] after it.
pub fn hybrid_session<I: SimInput, G: Plugin + Clone>(
    game: G,
    config: HybridConfig,
) -> DeterministicPlugin<HybridInput<I>> {
    DeterministicPlugin::new(HybridGame::<G, I> {
        game,
        config,
        input: PhantomData,
    })
}

/// The App's side of a hybrid session, added after the session plugin ([`hybrid_session`]):
///
/// - keeps [`PropOwnedHere`] in step with ownership on an ownership participant;
/// - each frame, in [`DeterministicSet::ReadLocalInput`], chooses the owned props the next
///   input carries ([`choose_carried`]; counted in [`HybridStats`]);
/// - installs the session's input source: the game's input (scripted, or the latest
///   `LocalInputs<I>` the game wrote: frames between two ticks are not merged) with those
///   props stamped with the input's tick;
/// - adds [`HybridHook`] to the session's hooks ([`VerifiedProps`]).
pub struct HybridPlugin<I: SimInput> {
    config: HybridConfig,
    scripted: Option<ScriptedInput<I>>,
}

impl<I: SimInput> HybridPlugin<I> {
    /// The plugin with `config` (the one given to [`hybrid_session`]).
    pub fn new(config: HybridConfig) -> Self {
        Self {
            config,
            scripted: None,
        }
    }

    /// The game's input of `(player, tick)` comes from `input` (a scripted player, a test)
    /// instead of `LocalInputs<I>`.
    pub fn scripted(
        mut self,
        input: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static,
    ) -> Self {
        self.scripted = Some(Arc::new(input));
        self
    }
}

impl<I: SimInput> Plugin for HybridPlugin<I> {
    /// # Panics
    /// When the session plugin of `HybridInput<I>` was not added before this one.
    fn build(&self, app: &mut App) {
        let outbox = Arc::new(Mutex::new(source::Outbox::<I>::default()));
        let max = self.config.max_props_per_input;
        app.insert_resource(self.config.clone())
            .insert_resource(source::SharedOutbox(outbox.clone()))
            .insert_resource(source::input_source(outbox, self.scripted.clone(), max))
            .init_resource::<HybridStats>()
            .init_resource::<VerifiedProps>()
            .register_type::<HybridStats>()
            .register_type::<VerifiedProps>()
            .register_type::<OwnedProp>()
            .register_type::<PropOwnedHere>()
            .add_systems(
                PreUpdate,
                (source::mark_owned_props, source::gather_owned_props::<I>)
                    .chain()
                    .in_set(DeterministicSet::ReadLocalInput),
            );
        if let Err(error) = app.add_verified_tick_hook::<HybridInput<I>>(HybridHook) {
            panic!("HybridPlugin needs the hybrid session plugin added first: {error}");
        }
    }
}
