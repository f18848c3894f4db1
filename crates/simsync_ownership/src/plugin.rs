//! [`OwnershipPlugin`]: wires the entity server ([`crate::EntityServer`]) or a participant
//! ([`crate::OwnershipClient`]) into an App.

use bevy::prelude::*;
use bevy_rapier3d::prelude::{CollisionEvent, PhysicsSet, TimestepMode};
use simsync_net::NetClock;
use simsync_net::bevy_renet::{RenetClient, RenetReceive, RenetSend, RenetServer};

use crate::activity::ActivityConfig;
use crate::budget::StateBudgetConfig;
use crate::client::{self, OwnershipClient};
use crate::clock::{OwnershipClock, advance_clock};
use crate::components;
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::host::{PhysicsHostConfig, StateLimits};
use crate::limits::EntityServerLimits;
use crate::messages::{
    BidRefused, CountedSilent, OwnershipChanged, ParticipantEnded, ParticipantGone,
    ParticipantReturned, RoomClosing,
};
use crate::server::{self, EntityServer};
use crate::sets::OwnershipSet;
use crate::traffic::{Meter, StateTraffic};

/// Which side of the ownership protocol an App runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum OwnershipRole {
    /// The entity server: arbitrates ownership and relays state (needs a `RenetServer`).
    EntityServer,
    /// A participant: simulates, bids, owns and sends state (needs a `RenetClient` and Rapier).
    Participant,
}

/// The config was rejected when the plugin was built; the plugin added no systems. Inserted as
/// a resource so the App can report it.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct OwnershipSetupError(pub OwnershipError);

/// Simulation ownership of Rapier bodies over renet, as the entity server or as a participant
/// (the crate docs describe the model; [`OwnershipSet`] the schedules).
///
/// The entity server needs a `RenetServer` resource (e.g. from
/// [`NetServerPlugin`](simsync_net::NetServerPlugin) and
/// [`insert_net_server`](simsync_net::NetAppExt::insert_net_server)); a participant needs a
/// `RenetClient`, a fixed network tick (`NetClock::Fixed`) and Rapier (`RapierPhysicsPlugin`)
/// in the same App; the plugin puts Rapier on that tick ([`fixed_physics_step`], or an
/// [`OwnershipSetupError`] saying how to fix the setup). Systems wait while the
/// resource is missing, so it may be inserted later. Rule timings run on [`OwnershipClock`].
/// The crate docs show a server and a participant App.
#[derive(Debug, Clone)]
pub struct OwnershipPlugin {
    role: OwnershipRole,
    config: OwnershipConfig,
    activity: ActivityConfig,
    name: String,
    limits: EntityServerLimits,
    budget: StateBudgetConfig,
    host: Option<PhysicsHostConfig>,
    state_limits: Option<StateLimits>,
}

impl OwnershipPlugin {
    /// The entity server ([ownership rules 1–5 and 7](crate::rules); state relay), with the
    /// default [`OwnershipConfig`].
    pub fn entity_server() -> Self {
        Self::new(OwnershipRole::EntityServer)
    }

    /// A participant ([ownership rules 6–14](crate::rules); state sending and applying), with
    /// the default [`OwnershipConfig`] and [`ActivityConfig`].
    pub fn participant() -> Self {
        Self::new(OwnershipRole::Participant)
    }

    fn new(role: OwnershipRole) -> Self {
        Self {
            role,
            config: OwnershipConfig::default(),
            activity: ActivityConfig::default(),
            name: String::from("participant"),
            limits: EntityServerLimits::default(),
            budget: StateBudgetConfig::default(),
            host: None,
            state_limits: None,
        }
    }

    /// The entity server's physics host ([ownership rule 21](crate::rules#rule-21--the-physics-host)):
    /// the server simulates the bodies nobody simulates — moving and unowned, or (with
    /// `interest_radius`) volunteered by a far owner — for everyone, as
    /// [`ParticipantId::ENTITY_SERVER`](crate::ParticipantId::ENTITY_SERVER) at `yield_priority`,
    /// and refuses owners' impossible states with `host.limits` (rule 22). Entity server only
    /// (ignored by a participant).
    ///
    /// The server's App then needs Rapier (`RapierPhysicsPlugin`, put on the ownership tick as
    /// a participant's is, [`fixed_physics_step`]), a fixed `NetClock`, and the same bodies as
    /// the participants: colliders, masses and the static scene, since the host simulates them.
    /// Without Rapier the host stays off and an [`OwnershipSetupError`] says why; a config
    /// that does not validate stops the plugin with one.
    #[must_use]
    pub fn with_physics_host(mut self, host: PhysicsHostConfig) -> Self {
        self.host = Some(host);
        self
    }

    /// The entity server refuses owners' impossible states ([ownership rule
    /// 22](crate::rules#rule-22--impossible-states)), with or without the physics host
    /// (without it, the server's state of a body is the last one it accepted). Default: off,
    /// unless the physics host's config sets them. Entity server only.
    #[must_use]
    pub fn with_state_limits(mut self, limits: StateLimits) -> Self {
        self.state_limits = Some(limits);
        self
    }

    /// The byte budgets and interest radius of state traffic ([rules 17–19](crate::rules#rule-17--byte-budgets));
    /// default [`StateBudgetConfig::default`]. A budget that does not validate stops the plugin
    /// with an [`OwnershipSetupError`].
    #[must_use]
    pub fn with_state_budget(mut self, budget: StateBudgetConfig) -> Self {
        self.budget = budget;
        self
    }

    /// A participant's upload budget, bytes per second of state batches
    /// ([rule 17](crate::rules#rule-17--byte-budgets)); default 64,000.
    #[must_use]
    pub fn with_upload_budget(mut self, bytes_per_second: u32) -> Self {
        self.budget.upload_bytes_per_second = bytes_per_second;
        self
    }

    /// The entity server's relay budget per participant, bytes per second
    /// ([rule 17](crate::rules#rule-17--byte-budgets)); default 128,000.
    #[must_use]
    pub fn with_relay_budget(mut self, bytes_per_second: u32) -> Self {
        self.budget.relay_bytes_per_second = bytes_per_second;
        self
    }

    /// The entity server relays to each participant only bodies within `meters` of its avatar
    /// ([rule 19](crate::rules#rule-19--interest-radius)); default: every body.
    #[must_use]
    pub fn with_interest_radius(mut self, meters: f32) -> Self {
        self.budget.interest_radius = Some(meters);
        self
    }

    /// Whether bodies travel as deltas against acknowledged states where that is smaller
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)); default `true`.
    #[must_use]
    pub fn with_delta_encoding(mut self, on: bool) -> Self {
        self.budget.delta_encoding = on;
        self
    }

    /// The state budgets.
    pub fn state_budget(&self) -> &StateBudgetConfig {
        &self.budget
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

    /// The entity server's per-connection rate limits (default
    /// [`EntityServerLimits::default`]); ignored by a participant.
    #[must_use]
    pub fn with_limits(mut self, limits: EntityServerLimits) -> Self {
        self.limits = limits;
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
    fn finish(&self, app: &mut App) {
        // Every plugin is built by now: the host's Rapier may be added after this plugin.
        let hosting = app
            .world()
            .get_resource::<EntityServer>()
            .is_some_and(|s| s.physics_host().is_some());
        if hosting && !app.world().contains_resource::<Messages<CollisionEvent>>() {
            let error = OwnershipError::PhysicsTimestep {
                found: String::from("a physics host in an entity server App without Rapier"),
                fix: "add `RapierPhysicsPlugin::<NoUserData>::default()` (and the bodies' \
                      colliders) to the entity server's App, or drop `with_physics_host`",
            };
            error!("OwnershipPlugin: physics host off: {error}");
            if let Some(mut server) = app.world_mut().get_resource_mut::<EntityServer>() {
                server.stop_host();
            }
            app.insert_resource(OwnershipSetupError(error));
        }
    }

    fn build(&self, app: &mut App) {
        app.add_message::<OwnershipChanged>()
            .add_message::<BidRefused>()
            .add_message::<CountedSilent>()
            .add_message::<RoomClosing>()
            .add_message::<ParticipantEnded>()
            .add_message::<ParticipantGone>()
            .add_message::<ParticipantReturned>()
            .configure_sets(PreUpdate, OwnershipSet::Receive.after(RenetReceive))
            .configure_sets(
                PostUpdate,
                OwnershipSet::Send
                    .after(PhysicsSet::Writeback)
                    .before(RenetSend),
            );
        components::register_types(app);
        let started = match self.role {
            OwnershipRole::EntityServer => self.start_entity_server(app),
            OwnershipRole::Participant => self.start_participant(app),
        };
        match started {
            Ok(()) => {
                app.insert_resource(self.config.clone())
                    .insert_resource(self.budget)
                    .init_resource::<StateTraffic>()
                    .init_resource::<Meter>()
                    .add_systems(PostUpdate, measure_traffic.after(OwnershipSet::Send))
                    .init_resource::<OwnershipClock>()
                    .add_systems(PreUpdate, advance_clock.in_set(OwnershipSet::Receive));
            }
            Err(error) => {
                error!("OwnershipPlugin not started: {error}");
                app.insert_resource(OwnershipSetupError(error));
            }
        }
    }
}

/// The Rapier step a participant must use: its Rapier world on the ownership tick, so that
/// physics and the rule timings advance together and two runs of the same script give the same
/// ownership history ([reproducible participants](crate::rules#reproducible-participants)).
///
/// The tick is the App's `NetClock::Fixed` step (`clock`). Returns the `TimestepMode` to insert:
/// `Some(Fixed { dt: tick, substeps: 1 })` when `mode` is missing or `Variable` (Rapier's
/// default), `None` when `mode` is already `Fixed` with that `dt` (any substeps).
///
/// # Errors
/// [`OwnershipError::PhysicsTimestep`] when there is no fixed tick (no `NetClock`,
/// `NetClock::Real` or a zero step), or when `mode` is `Fixed` with another `dt` or
/// `Interpolated` (both follow something other than the ownership clock). The message says how
/// to fix the setup.
pub fn fixed_physics_step(
    clock: Option<&NetClock>,
    mode: Option<&TimestepMode>,
) -> Result<Option<TimestepMode>, OwnershipError> {
    let tick = match clock {
        Some(NetClock::Fixed(step)) if !step.is_zero() => *step,
        other => {
            return Err(OwnershipError::PhysicsTimestep {
                found: format!("network clock {other:?}"),
                fix: "give the participant's network plugin a fixed tick, e.g. \
                      `NetClientPlugin::default().with_clock(NetClock::fixed_hz(64))`",
            });
        }
    };
    let dt = tick.as_secs_f32();
    match mode {
        None | Some(TimestepMode::Variable { .. }) => {
            Ok(Some(TimestepMode::Fixed { dt, substeps: 1 }))
        }
        Some(TimestepMode::Fixed { dt: set, .. }) if (set - dt).abs() <= f32::EPSILON * dt => {
            Ok(None)
        }
        Some(mode) => Err(OwnershipError::PhysicsTimestep {
            found: format!("Rapier {mode:?} with an ownership tick of {tick:?}"),
            fix: "remove the `TimestepMode` resource (the plugin sets it) or set \
                  `TimestepMode::Fixed` with `dt` equal to the network clock's step",
        }),
    }
}

/// `PreUpdate`, first of a participant's systems: [`fixed_physics_step`] every frame (a
/// resource comparison once set). On an error the participant stops: its
/// [`OwnershipClient`] is removed and an [`OwnershipSetupError`] inserted.
fn keep_physics_on_the_tick(
    clock: Option<Res<NetClock>>,
    mode: Option<Res<TimestepMode>>,
    server: Option<ResMut<EntityServer>>,
    mut commands: Commands,
) {
    match fixed_physics_step(clock.as_deref(), mode.as_deref()) {
        Ok(None) => {}
        Ok(Some(fixed)) => commands.insert_resource(fixed),
        Err(error) => {
            error!("OwnershipPlugin stopped: {error}");
            commands.remove_resource::<OwnershipClient>();
            if let Some(mut server) = server {
                // The entity server goes on arbitrating and relaying, without its host.
                server.stop_host();
            }
            commands.insert_resource(OwnershipSetupError(error));
        }
    }
}

impl OwnershipPlugin {
    fn start_entity_server(&self, app: &mut App) -> Result<(), OwnershipError> {
        self.config.validate()?;
        self.activity.validate()?;
        let mut state = EntityServer::new(self.config.clone())?
            .with_limits(self.limits)?
            .with_state_budget(self.budget)?;
        if let Some(host) = self.host {
            state = state.with_physics_host(host, self.activity)?;
        }
        if let Some(limits) = self.state_limits {
            state = state.with_state_limits(limits)?;
        }
        let update = server::update.run_if(resource_exists::<RenetServer>);
        app.insert_resource(state).add_systems(
            PreUpdate,
            (server::register_bodies, update)
                .chain()
                .after(advance_clock)
                .in_set(OwnershipSet::Receive),
        );
        if self.host.is_some() {
            let hosting = resource_exists::<RenetServer>;
            app.add_systems(
                PreUpdate,
                (keep_physics_on_the_tick, server::sync_host_world)
                    .chain()
                    .after(server::update)
                    .in_set(OwnershipSet::Receive),
            )
            .add_systems(
                PostUpdate,
                server::host_tick
                    .run_if(hosting)
                    .after(PhysicsSet::Writeback)
                    .before(RenetSend),
            );
        }
        Ok(())
    }

    fn start_participant(&self, app: &mut App) -> Result<(), OwnershipError> {
        let state = OwnershipClient::new(self.config.clone(), self.activity, self.name.clone())?
            .with_state_budget(self.budget)?;
        // `keep_physics_on_the_tick` removes the participant's state when the physics step
        // cannot follow the tick.
        let receive = client::receive
            .run_if(resource_exists::<RenetClient>.and_then(resource_exists::<OwnershipClient>));
        app.insert_resource(state)
            .insert_resource(self.activity)
            .add_systems(
                PreUpdate,
                (
                    keep_physics_on_the_tick.run_if(resource_exists::<OwnershipClient>),
                    client::register_bodies.run_if(resource_exists::<OwnershipClient>),
                    receive,
                )
                    .chain()
                    .after(advance_clock)
                    .in_set(OwnershipSet::Receive),
            )
            .add_systems(
                PostUpdate,
                client::observe_and_send
                    .run_if(
                        resource_exists::<RenetClient>.and_then(resource_exists::<OwnershipClient>),
                    )
                    .in_set(OwnershipSet::Send),
            );
        Ok(())
    }
}

/// `PostUpdate`, after [`OwnershipSet::Send`]: updates [`StateTraffic`] from the participant's
/// or the entity server's running totals.
pub(crate) fn measure_traffic(
    clock: Res<OwnershipClock>,
    client: Option<Res<OwnershipClient>>,
    server: Option<Res<EntityServer>>,
    mut meter: ResMut<Meter>,
    mut traffic: ResMut<StateTraffic>,
) {
    let totals = match (client, server) {
        (Some(client), _) => client.traffic(),
        (None, Some(server)) => server.traffic(),
        (None, None) => return,
    };
    *traffic = meter.0.update(&totals, clock.now());
}
