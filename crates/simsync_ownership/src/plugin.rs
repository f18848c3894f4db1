//! [`OwnershipPlugin`]: simulation ownership of Rapier bodies over renet, as an entity server
//! ([`OwnershipPlugin::entity_server`]) or as a participant ([`OwnershipPlugin::participant`]).
//!
//! # Model
//! Every participant simulates every body in its own Rapier world; each moving body has at most
//! one *simulation owner* whose state is authoritative. The entity server arbitrates ownership
//! (rules 1–5 and 7, through [`OwnershipArbiter`](crate::OwnershipArbiter)) and relays each
//! owner's state updates to everyone else; participants decide when to bid, yield and release
//! (rules 6–14, through [`ParticipantOwnership`](crate::ParticipantOwnership)) from what their
//! own physics shows. Bodies are matched across Apps by [`BodyNetId`]: give
//! each body the same id on every participant and on the server (the server needs only the ids,
//! a [`RigidBody`](bevy_rapier3d::prelude::RigidBody) for the kind and optionally a `Transform`
//! — no physics).
//!
//! # Schedules
//!
//! | schedule | set | entity server | participant |
//! |---|---|---|---|
//! | `PreUpdate`, after `RenetReceive` | [`OwnershipSet::Receive`] | handshake, bids, releases, state updates (relayed), silence expiry, disconnects | handshake, grants, refusals, owner changes, relayed state applied to `Transform` + `Velocity` |
//! | `PostUpdate`, after Rapier's `PhysicsSet::Writeback`, before `RenetSend` | [`OwnershipSet::Send`] | — | observations → rules 6–14 → bids / releases; owned bodies' state updates |
//!
//! Game code (scripts, the [user API](crate::OwnershipEntityCommandsExt)) runs in `Update`,
//! between the two. Rapier must run in `PostUpdate` (its default) so that the participant
//! observes the state it just simulated.
//!
//! # Time
//! The plugin keeps its own clock, [`OwnershipClock`], advanced once per `App::update` by the
//! [`NetClock`] step (`NetClock::Fixed(dt)` for reproducible tests), or by `Time`'s delta when
//! there is no `NetClock`. Every rule timing of [`OwnershipConfig`] is measured on it.
//!
//! # Required plugins
//! The entity server needs a `RenetServer` resource (e.g. from
//! [`NetServerPlugin`](simsync_net::NetServerPlugin) and
//! [`insert_net_server`](simsync_net::NetAppExt::insert_net_server)); a participant needs a
//! `RenetClient` and Rapier (`RapierPhysicsPlugin`) in the same App. Systems wait while the
//! resource is missing, so it may be inserted later.

use core::time::Duration;

use bevy::prelude::*;
use bevy_rapier3d::prelude::PhysicsSet;
use simsync_net::NetClock;
use simsync_net::bevy_renet::{RenetClient, RenetReceive, RenetSend, RenetServer};

use crate::arbiter::RefusalReason;
use crate::client::{self, OwnershipParticipant};
use crate::components::{BodyNetId, Ownable, OwnershipBid, OwnershipLock, SimulationOwner};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::server::{self, EntityServer};

/// Which side of the ownership protocol an App runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum OwnershipRole {
    /// The entity server: arbitrates ownership and relays state (needs a `RenetServer`).
    EntityServer,
    /// A participant: simulates, bids, owns and sends state (needs a `RenetClient` and Rapier).
    Participant,
}

/// How a participant decides from its Rapier state whether a body is *active* (moving) or *at
/// rest* — the inputs of ownership rules 7 (volunteer), 12 (release at rest) and 14.
///
/// A body is **at rest** when Rapier has put it to sleep, or when its linear speed has stayed
/// below `rest_linear_speed` and its angular speed below `rest_angular_speed` for `rest_delay`
/// (so a ball at the top of a bounce is not at rest). A body this participant does not own is
/// also **active** while its local copy is *displaced* — more than `displacement_meters` or
/// `displacement_degrees` away from the last state the network agreed on (the last relayed or
/// released state, or where it first came to rest) — so a copy that was knocked only in this
/// participant's world is volunteered for (ownership rule 7) and the network converges on it,
/// instead of staying different from everyone else's.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct ActivityConfig {
    /// Linear speed below which a body may be at rest, m/s. Default 0.05 m/s.
    pub rest_linear_speed: f32,
    /// Angular speed below which a body may be at rest, rad/s. Default 0.1 rad/s.
    pub rest_angular_speed: f32,
    /// How long a body must stay below both speeds to be at rest. Default 250 ms.
    pub rest_delay: Duration,
    /// Distance from the agreed state beyond which an unowned copy is displaced, m.
    /// Default 0.005 m (5 mm).
    pub displacement_meters: f32,
    /// Rotation from the agreed state beyond which an unowned copy is displaced, degrees.
    /// Default 2°.
    pub displacement_degrees: f32,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        Self {
            rest_linear_speed: 0.05,
            rest_angular_speed: 0.1,
            rest_delay: Duration::from_millis(250),
            displacement_meters: 0.005,
            displacement_degrees: 2.0,
        }
    }
}

impl ActivityConfig {
    /// Checks every field: speeds and displacements finite and ≥ 0.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, value) in [
            ("rest_linear_speed", self.rest_linear_speed),
            ("rest_angular_speed", self.rest_angular_speed),
            ("displacement_meters", self.displacement_meters),
            ("displacement_degrees", self.displacement_degrees),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: value.to_string(),
                    reason: "a finite number ≥ 0",
                });
            }
        }
        Ok(())
    }
}

/// The system sets of the plugin (see the [module docs](self) for where they run).
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnershipSet {
    /// `PreUpdate`, after `RenetReceive`: everything received is handled.
    Receive,
    /// `PostUpdate`, after Rapier's writeback and before `RenetSend`: a participant observes its
    /// bodies, applies rules 6–14 and sends bids, releases and state updates.
    Send,
}

/// The plugin's clock: time since the App started, advanced once per `App::update` by the
/// [`NetClock`] step (or `Time`'s delta without a `NetClock`). The rule timings of
/// [`OwnershipConfig`] are measured on it.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnershipClock {
    now: Duration,
}

impl OwnershipClock {
    /// Time since the first update.
    pub fn now(&self) -> Duration {
        self.now
    }
}

/// The config was rejected when the plugin was built; the plugin added no systems. Inserted as
/// a resource so the App can report it.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct OwnershipSetupError(pub OwnershipError);

/// A body's owner or priority changed, as the entity server announced it (written on the
/// server when it decides, and on every participant when it hears). `owner: None` (priority
/// [`Priority::NONE`]) when the body became unowned: released at rest (ownership rule 12),
/// expired for silence or cleared on a disconnect (ownership rule 5).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnershipChanged {
    /// The body's entity in this App.
    pub entity: Entity,
    /// The body's network id.
    pub body: BodyId,
    /// The new owner.
    pub owner: Option<ParticipantId>,
    /// The new owner's priority.
    pub priority: Priority,
}

/// The entity server refused one of this participant's messages about a body: a bid or a
/// priority change (ownership rules 1–3, 7), a release or a state update from a participant
/// that does not own the body (ownership rule 4). Written on the participant.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct BidRefused {
    /// The body's entity in this App.
    pub entity: Entity,
    /// The body's network id.
    pub body: BodyId,
    /// Why (refined from the wire reason, see [`crate::wire`]).
    pub reason: RefusalReason,
}

/// Marks the participant's own avatar (player body). A body the avatar collides with (a contact
/// that becomes active while the body moves) is *touched by the avatar* and gets a POKE bid
/// (ownership rule 9). An avatar that is also [`Ownable`] is
/// always treated as held by its participant (ownership rule 10), so each participant owns its
/// own avatar at GRAB and relays its state to the others.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct ParticipantAvatar;

/// A script changed the body this frame: observed once as a script edit (POKE bid, ownership
/// rule 8), then removed. Inserted by [`OwnershipEntityCommandsExt::poke`].
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Poked;

/// This participant holds the body (GRAB bid, ownership rule 10) until the component is
/// removed. Inserted by [`OwnershipEntityCommandsExt::grab`], removed by
/// [`OwnershipEntityCommandsExt::release_grab`].
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Held;

/// This participant no longer wants to simulate the body: as its owner it drops to YIELD
/// (ownership rule 13), and it does not volunteer for it (ownership rules 7 and 14). Pokes and
/// grabs still bid. Inserted by [`OwnershipEntityCommandsExt::yield_ownership`], removed by
/// [`OwnershipEntityCommandsExt::restore_interest`].
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Uninterested;

/// The participant's user API, on `commands.entity(body)`:
///
/// ```
/// # use bevy::prelude::*;
/// # use simsync_ownership::OwnershipEntityCommandsExt;
/// fn script(mut commands: Commands, body: Single<Entity, With<simsync_ownership::Ownable>>) {
///     commands.entity(*body).poke(); // a script moved it: bid POKE (rule 8)
///     commands.entity(*body).grab(); // held from now on: bid GRAB (rule 10)
///     commands.entity(*body).release_grab();
///     commands.entity(*body).yield_ownership(); // not interested any more: YIELD (rule 13)
/// }
/// ```
///
/// Each only marks the body ([`Poked`], [`Held`], [`Uninterested`]); the participant's
/// [`OwnershipSet::Send`] systems turn the marks into bids at the next observation. The server
/// decides; its answers arrive as [`OwnershipChanged`] and [`BidRefused`] messages.
pub trait OwnershipEntityCommandsExt {
    /// A script changed the body (impulse, teleport, ...) this frame: bid POKE for it
    /// (ownership rule 8), unless already owned at POKE or more.
    fn poke(&mut self) -> &mut Self;
    /// This participant holds the body from now on: bid GRAB (ownership rule 10), or raise the
    /// owned priority to GRAB; a held body is never released at rest.
    fn grab(&mut self) -> &mut Self;
    /// Stops holding the body. Ownership stays (at GRAB) until the body comes to rest and is
    /// released (ownership rule 12) or is yielded.
    fn release_grab(&mut self) -> &mut Self;
    /// This participant is no longer interested in the body: an owner drops to YIELD (ownership
    /// rule 13) so others may take it at once (ownership rule 14); also stops holding it.
    fn yield_ownership(&mut self) -> &mut Self;
    /// Undoes [`yield_ownership`](Self::yield_ownership): the body may be volunteered for again.
    fn restore_interest(&mut self) -> &mut Self;
}

impl OwnershipEntityCommandsExt for EntityCommands<'_> {
    fn poke(&mut self) -> &mut Self {
        self.insert(Poked)
    }

    fn grab(&mut self) -> &mut Self {
        self.insert(Held).remove::<Uninterested>()
    }

    fn release_grab(&mut self) -> &mut Self {
        self.remove::<Held>()
    }

    fn yield_ownership(&mut self) -> &mut Self {
        self.insert(Uninterested).remove::<Held>()
    }

    fn restore_interest(&mut self) -> &mut Self {
        self.remove::<Uninterested>()
    }
}

/// Simulation ownership of Rapier bodies over renet (see the [module docs](self)).
///
/// ```no_run
/// use bevy::prelude::*;
/// use simsync_net::prelude::*;
/// use simsync_ownership::OwnershipPlugin;
///
/// let network = MemoryNetwork::perfect(1);
/// let mut server = App::new();
/// server
///     .add_plugins((MinimalPlugins, NetServerPlugin::default().with_clock(NetClock::fixed_hz(64))))
///     .add_plugins(OwnershipPlugin::entity_server())
///     .insert_net_server(network.server_transport()?);
/// # Ok::<(), simsync_net::NetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OwnershipPlugin {
    role: OwnershipRole,
    config: OwnershipConfig,
    activity: ActivityConfig,
    name: String,
}

impl OwnershipPlugin {
    /// The entity server (ownership rules 1–5 and 7; state relay), with the default
    /// [`OwnershipConfig`].
    pub fn entity_server() -> Self {
        Self::new(OwnershipRole::EntityServer)
    }

    /// A participant (ownership rules 6–14; state sending and applying), with the default
    /// [`OwnershipConfig`] and [`ActivityConfig`].
    pub fn participant() -> Self {
        Self::new(OwnershipRole::Participant)
    }

    fn new(role: OwnershipRole) -> Self {
        Self {
            role,
            config: OwnershipConfig::default(),
            activity: ActivityConfig::default(),
            name: String::from("participant"),
        }
    }

    /// Uses `config`. The server and every participant must use the same one.
    #[must_use]
    pub fn with_config(mut self, config: OwnershipConfig) -> Self {
        self.config = config;
        self
    }

    /// Uses `activity` to tell moving from resting bodies (participant only).
    #[must_use]
    pub fn with_activity(mut self, activity: ActivityConfig) -> Self {
        self.activity = activity;
        self
    }

    /// The display name a participant sends in its `Hello`.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The role.
    pub fn role(&self) -> OwnershipRole {
        self.role
    }

    /// The config.
    pub fn config(&self) -> &OwnershipConfig {
        &self.config
    }
}

impl Plugin for OwnershipPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<OwnershipChanged>()
            .add_message::<BidRefused>()
            .register_type::<SimulationOwner>()
            .register_type::<OwnershipBid>()
            .register_type::<Ownable>()
            .register_type::<OwnershipLock>()
            .register_type::<BodyNetId>()
            .register_type::<ParticipantAvatar>()
            .register_type::<Poked>()
            .register_type::<Held>()
            .register_type::<Uninterested>()
            .configure_sets(PreUpdate, OwnershipSet::Receive.after(RenetReceive))
            .configure_sets(
                PostUpdate,
                OwnershipSet::Send
                    .after(PhysicsSet::Writeback)
                    .before(RenetSend),
            );
        let checked = self
            .config
            .validate()
            .and_then(|()| self.activity.validate());
        if let Err(error) = checked {
            error!("OwnershipPlugin not started: {error}");
            app.insert_resource(OwnershipSetupError(error));
            return;
        }
        app.insert_resource(self.config.clone())
            .init_resource::<OwnershipClock>();
        match self.role {
            OwnershipRole::EntityServer => {
                let state = match EntityServer::new(self.config.clone()) {
                    Ok(state) => state,
                    Err(error) => {
                        app.insert_resource(OwnershipSetupError(error));
                        return;
                    }
                };
                app.insert_resource(state).add_systems(
                    PreUpdate,
                    (
                        advance_clock,
                        server::register_bodies,
                        server::update.run_if(resource_exists::<RenetServer>),
                    )
                        .chain()
                        .in_set(OwnershipSet::Receive),
                );
            }
            OwnershipRole::Participant => {
                let state = match OwnershipParticipant::new(
                    self.config.clone(),
                    self.activity,
                    self.name.clone(),
                ) {
                    Ok(state) => state,
                    Err(error) => {
                        app.insert_resource(OwnershipSetupError(error));
                        return;
                    }
                };
                app.insert_resource(state)
                    .insert_resource(self.activity)
                    .add_systems(
                        PreUpdate,
                        (
                            advance_clock,
                            client::register_bodies,
                            client::receive.run_if(resource_exists::<RenetClient>),
                        )
                            .chain()
                            .in_set(OwnershipSet::Receive),
                    )
                    .add_systems(
                        PostUpdate,
                        client::observe_and_send
                            .run_if(resource_exists::<RenetClient>)
                            .in_set(OwnershipSet::Send),
                    );
            }
        }
    }
}

/// Advances [`OwnershipClock`] by this update's step.
fn advance_clock(
    mut clock: ResMut<OwnershipClock>,
    net: Option<Res<NetClock>>,
    real: Option<Res<Time<bevy::time::Real>>>,
    time: Option<Res<Time>>,
) {
    let dt = match net.as_deref() {
        Some(net) => net.delta(real.as_deref()),
        None => time.map(|t| t.delta()).unwrap_or_default(),
    };
    clock.now += dt;
}
