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
//! 2. the tick's carried poses, resolved in turns ([`carried_poses`]: every input's first pose
//!    in player order, then every input's second, ..., so a full pool is shared among the
//!    players however many poses one of them carries): a pose counts
//!    only if it is fresh (stamped at most [`HybridConfig::max_stale_ticks`] before `t`, and
//!    not after `t`: no honest input is) and is its input's first pose of its prop; a prop
//!    carried by several inputs — an ownership change in flight, or the repeated last input of
//!    a player who left — keeps the fresh pose with the latest stamp, of equal stamps the
//!    lowest player's. Each sets its prop's proxy to the pose moved on by its velocity for
//!    `t − stamp` ticks; a prop without a proxy takes the lowest parked slot, else the slot
//!    seen longest ago.
//!
//! **What a hostile input can do.** The players' worlds cannot know who owns a prop, so they
//! trust the carried poses, within bounds every peer applies alike: a pose stamped in the
//! future or long ago never competes with a fresh one (so it cannot hide the owner's), poses
//! past [`MAX_PROPS_PER_INPUT`] are not looked at, and a prop given twice in one input keeps
//! its first pose. A player carrying a prop it does not own wins it by the same rule as an
//! ownership change (latest fresh stamp, then lowest player); one carrying many props takes
//! turns with the others for a full pool's proxies. Each of these is counted in [`VerifiedProps`] (stale, ignored, duplicate,
//! contested, a kind past the shapes), the same on every peer for a verified tick.
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
//! An input longer than the session's input size cap would be dropped whole by the relay, the
//! game's input with it: the last props are taken off it until it fits (counted in
//! [`HybridStats::props_over_bytes`]).
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
    DeterministicPlugin, DeterministicSession, DeterministicSet, PlayerIndex, SimInput, Tick,
    VerifiedTickHookAppExt,
};

pub use avatar::{
    AvatarCollider, AvatarOf, AvatarPose, HeldProp, PlayerAvatarsPlugin, PropGrabCommandsExt,
    avatar_poses, hold_velocity,
};
pub use connection::{OwnershipConnection, OwnershipConnectionPlugin};
pub use hook::{HybridHook, VerifiedProps};
pub use pose::{
    Carried, CarriedPose, HybridError, HybridInput, MAX_PROPS_PER_INPUT, PropPose, PropPoses,
    carried_poses, is_fresh,
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
    /// Proxy colliders in the players' worlds (default 32; `1..=`[`MAX_PROXY_SLOTS`]): how
    /// many props the players can touch at once. The rollback's cost grows with this, not with the props.
    pub proxy_slots: u16,
    /// Poses one input carries at most (default 6; `1..=`[`MAX_PROPS_PER_INPUT`]). Keep
    /// `max_props_per_input × 30` bytes plus the game's input under the session's input size
    /// cap (256 bytes unless configured): the props past it are taken off each input
    /// ([`HybridStats::props_over_bytes`]).
    pub max_props_per_input: usize,
    /// A carried pose older than this many ticks at the tick that applies it is ignored
    /// (default 32; at most [`MAX_STALE_TICKS`]).
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

/// Proxy slots a session may have at most: every slot is a collider of every players' world,
/// copied and re-simulated by each rollback.
pub const MAX_PROXY_SLOTS: u16 = 1024;

/// Ticks a carried pose may be stale at most ([`HybridConfig::max_stale_ticks`]).
pub const MAX_STALE_TICKS: Tick = 1024;

impl HybridConfig {
    /// Checks the values a session can run with: `proxy_slots` in `1..=`[`MAX_PROXY_SLOTS`],
    /// `max_props_per_input` in `1..=`[`MAX_PROPS_PER_INPUT`], `max_stale_ticks` in
    /// `0..=`[`MAX_STALE_TICKS`], `rest_speed` finite and not negative, `tick_hz` not 0. An
    /// empty `shapes` is allowed (every proxy a 0.25 m ball).
    ///
    /// # Errors
    /// [`HybridError::BadConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), HybridError> {
        let bad = |field, allowed| Err(HybridError::BadConfig { field, allowed });
        if !(1..=MAX_PROXY_SLOTS).contains(&self.proxy_slots) {
            return bad("proxy_slots", "in 1..=1024");
        }
        if !(1..=MAX_PROPS_PER_INPUT).contains(&self.max_props_per_input) {
            return bad("max_props_per_input", "in 1..=32");
        }
        if !(0..=MAX_STALE_TICKS).contains(&self.max_stale_ticks) {
            return bad("max_stale_ticks", "in 0..=1024");
        }
        if !(self.rest_speed.is_finite() && self.rest_speed >= 0.0) {
            return bad("rest_speed", "finite and not negative");
        }
        if self.tick_hz == 0 {
            return bad("tick_hz", "the session's tick rate (not 0)");
        }
        Ok(())
    }

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

/// Why the App's [`HybridPlugin`] did not install (main-app resource; also written as a
/// [`HybridRefused`] message and logged). Without it the session runs on the game's default
/// inputs: no prop is carried.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct HybridSetupError(pub HybridError);

/// A refusal of the hybrid session the game must react to (main-app message): a
/// [`HybridPlugin`] that did not install ([`HybridSetupError`]), a grab or throw refused
/// ([`PropGrabCommandsExt`], counted in [`HybridStats::grabs_refused`]).
#[derive(Message, Debug, Clone, PartialEq)]
pub struct HybridRefused {
    /// The prop, for a grab or throw.
    pub entity: Option<Entity>,
    /// Why.
    pub error: HybridError,
}

/// Which [`HybridPlugin`] holds the App's hybrid side (main-app resource): one per App.
#[derive(Resource)]
struct HybridInstalled;

impl<I: SimInput> HybridPlugin<I> {
    /// Why this plugin cannot install in `app`, if it cannot.
    fn refusal(&self, app: &App) -> Option<HybridError> {
        if app.world().contains_resource::<HybridInstalled>() {
            return Some(HybridError::PluginAddedTwice);
        }
        if let Err(error) = self.config.validate() {
            return Some(error);
        }
        let Some(session) = app
            .world()
            .get_resource::<DeterministicSession<HybridInput<I>>>()
        else {
            return Some(HybridError::NoSession);
        };
        let hz = session.config().tick_rate.hz();
        (hz != self.config.tick_hz).then_some(HybridError::TickRateMismatch {
            config: self.config.tick_hz,
            session: hz,
        })
    }
}

impl<I: SimInput> Plugin for HybridPlugin<I> {
    /// A plugin added twice, without the session plugin before it, or with a configuration
    /// that fails [`HybridConfig::validate`] (or whose `tick_hz` is not the session's) installs
    /// nothing: the error is kept as [`HybridSetupError`], written as [`HybridRefused`] and
    /// logged; nothing panics.
    fn build(&self, app: &mut App) {
        app.add_message::<HybridRefused>()
            .init_resource::<HybridStats>()
            .register_type::<HybridStats>();
        if let Some(error) = self.refusal(app) {
            error!("hybrid session not set up: {error}");
            app.world_mut().write_message(HybridRefused {
                entity: None,
                error: error.clone(),
            });
            if !app.world().contains_resource::<HybridSetupError>() {
                app.insert_resource(HybridSetupError(error));
            }
            return;
        }
        let max_bytes = app
            .world()
            .resource::<DeterministicSession<HybridInput<I>>>()
            .config()
            .network
            .as_ref()
            .map_or(usize::MAX, |network| network.max_input_bytes);
        let outbox = Arc::new(Mutex::new(source::Outbox::<I>::default()));
        let max = self.config.max_props_per_input;
        let source = source::input_source(outbox.clone(), self.scripted.clone(), (max, max_bytes));
        app.insert_resource(HybridInstalled)
            .insert_resource(self.config.clone())
            .insert_resource(source::SharedOutbox(outbox))
            .insert_resource(source)
            .init_resource::<VerifiedProps>()
            .register_type::<VerifiedProps>()
            .register_type::<OwnedProp>()
            .register_type::<PropOwnedHere>()
            .add_systems(
                PreUpdate,
                (source::mark_owned_props, source::gather_owned_props::<I>)
                    .chain()
                    .in_set(DeterministicSet::ReadLocalInput),
            );
        // The session exists (checked above): the hook cannot be refused.
        let _ = app.add_verified_tick_hook::<HybridInput<I>>(HybridHook);
    }

    /// Not unique for Bevy, so a second plugin is not Bevy's "plugin already added" panic:
    /// its `build` refuses it with [`HybridError::PluginAddedTwice`] instead.
    fn is_unique(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct NoGame;

    impl Plugin for NoGame {
        fn build(&self, _app: &mut App) {}
    }

    fn setup_error(app: &App) -> Option<HybridError> {
        app.world()
            .get_resource::<HybridSetupError>()
            .map(|e| e.0.clone())
    }

    fn session_app() -> App {
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .add_plugins(hybrid_session::<u16, _>(NoGame, HybridConfig::default()));
        app
    }

    #[test]
    fn a_config_out_of_range_names_its_field() {
        let field = |config: HybridConfig| match config.validate() {
            Err(HybridError::BadConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let base = HybridConfig::default();
        assert_eq!(base.validate(), Ok(()));
        let cases = [
            (
                HybridConfig {
                    proxy_slots: 0,
                    ..base.clone()
                },
                "proxy_slots",
            ),
            (
                HybridConfig {
                    proxy_slots: u16::MAX,
                    ..base.clone()
                },
                "proxy_slots",
            ),
            (
                HybridConfig {
                    max_props_per_input: 0,
                    ..base.clone()
                },
                "max_props_per_input",
            ),
            (
                HybridConfig {
                    max_props_per_input: 33,
                    ..base.clone()
                },
                "max_props_per_input",
            ),
            (
                HybridConfig {
                    max_stale_ticks: -1,
                    ..base.clone()
                },
                "max_stale_ticks",
            ),
            (
                HybridConfig {
                    max_stale_ticks: Tick::MAX,
                    ..base.clone()
                },
                "max_stale_ticks",
            ),
            (
                HybridConfig {
                    rest_speed: f32::NAN,
                    ..base.clone()
                },
                "rest_speed",
            ),
            (
                HybridConfig {
                    rest_speed: -1.0,
                    ..base.clone()
                },
                "rest_speed",
            ),
            (
                HybridConfig {
                    tick_hz: 0,
                    ..base.clone()
                },
                "tick_hz",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(field(config), expected);
        }
        let no_shapes = HybridConfig {
            shapes: Vec::new(),
            ..base.clone()
        };
        assert_eq!(no_shapes.validate(), Ok(()));
        assert!(no_shapes.shape(9).as_ball().is_some());
        assert!(
            base.shape(200).as_ball().is_some(),
            "a kind past the list takes the first"
        );
    }

    #[test]
    fn a_hybrid_plugin_without_its_session_installs_nothing_and_says_why() {
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .add_plugins(HybridPlugin::<u16>::new(HybridConfig::default()));
        assert_eq!(setup_error(&app), Some(HybridError::NoSession));
        assert!(!app.world().contains_resource::<VerifiedProps>());
        let refused = app.world().resource::<Messages<HybridRefused>>();
        assert_eq!(refused.len(), 1);
        app.update();
    }

    #[test]
    fn a_second_hybrid_plugin_or_a_bad_config_is_refused_and_the_first_stays() {
        let mut app = session_app();
        app.add_plugins(HybridPlugin::<u16>::new(HybridConfig::default()));
        assert_eq!(setup_error(&app), None);
        let other = HybridConfig {
            proxy_slots: 4,
            ..default()
        };
        app.add_plugins(HybridPlugin::<u16>::new(other));
        assert_eq!(setup_error(&app), Some(HybridError::PluginAddedTwice));
        assert_eq!(app.world().resource::<HybridConfig>().proxy_slots, 32);

        let mut app = session_app();
        let wrong_rate = HybridConfig {
            tick_hz: 60,
            ..default()
        };
        app.add_plugins(HybridPlugin::<u16>::new(wrong_rate));
        assert_eq!(
            setup_error(&app),
            Some(HybridError::TickRateMismatch {
                config: 60,
                session: 64
            })
        );
        let mut app = session_app();
        let none = HybridConfig {
            max_props_per_input: 0,
            ..default()
        };
        app.add_plugins(HybridPlugin::<u16>::new(none));
        assert!(matches!(
            setup_error(&app),
            Some(HybridError::BadConfig {
                field: "max_props_per_input",
                ..
            })
        ));
    }
}
