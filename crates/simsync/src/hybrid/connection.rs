//! A hybrid App's second connection: the ownership participant's, to the entity server, beside
//! the session's connection to the relay ([`OwnershipConnection`], [`OwnershipConnectionPlugin`]).
//!
//! Both the session and [`OwnershipPlugin`](crate::OwnershipPlugin) read the App's one
//! `RenetClient`. The App's own `RenetClient` (and `ClientTransport`, driven by
//! `NetClientPlugin`) is the relay's; the entity server's lives in [`OwnershipConnection`] and
//! is swapped into the App's `RenetClient` while, and only while, the ownership systems run:
//!
//! | schedule | before the ownership set | [`OwnershipSet`] | after it |
//! |---|---|---|---|
//! | `PreUpdate`, after `RenetReceive`, before [`DeterministicSet::ReadLocalInput`] | advance the ownership connection and its transport by the [`NetClock`] step, swap it in | `Receive` | swap the relay's back |
//! | `PostUpdate`, after Rapier's writeback, before `RenetSend` | swap it in | `Send` | swap the relay's back, send the ownership connection's packets |
//!
//! The session's systems run after the first window and never inside either, so they always
//! see the relay's connection.

use bevy::prelude::*;
use bevy::time::Real;
use bevy_rapier3d::prelude::PhysicsSet;
use simsync_deterministic::DeterministicSet;
use simsync_net::bevy_renet::{RenetClient, RenetReceive, RenetSend};
use simsync_net::{ClientTransport, NetClock, NetTransportError, connection_config};
use simsync_ownership::OwnershipSet;

/// The ownership participant's connection of a hybrid App (main-app resource): a renet client
/// and its transport to the entity server, beside the App's own connection to the relay.
/// Insert it with [`OwnershipConnection::new`]; [`OwnershipConnectionPlugin`] drives it.
#[derive(Resource)]
pub struct OwnershipConnection {
    client: RenetClient,
    transport: ClientTransport,
    /// Whether the client is in the App's `RenetClient` now (inside an ownership window).
    swapped: bool,
    /// Whether the current transport failure was reported already.
    reported: bool,
    /// Transport failures reported, in total.
    failures: u64,
}

impl OwnershipConnection {
    /// A connection to the entity server over `transport` (a fresh renet client with the
    /// project's channels).
    pub fn new(transport: impl Into<ClientTransport>) -> Self {
        Self {
            client: RenetClient::new(connection_config()),
            transport: transport.into(),
            swapped: false,
            reported: false,
            failures: 0,
        }
    }

    /// Whether the connection to the entity server is up (outside the ownership windows).
    pub fn is_connected(&self) -> bool {
        !self.swapped && self.client.is_connected()
    }

    /// Transport failures of this connection written as [`NetTransportError`] so far (one per
    /// failure, not per frame).
    pub fn failures(&self) -> u64 {
        self.failures
    }

    fn report(&mut self, error: simsync_net::NetError, errors: &mut Messages<NetTransportError>) {
        if std::mem::replace(&mut self.reported, true) || self.transport.close_expected() {
            return;
        }
        self.failures += 1;
        warn!("ownership connection: {error}");
        errors.write(NetTransportError {
            server: false,
            error,
        });
    }
}

/// Drives a hybrid App's [`OwnershipConnection`] (see [the module](self)): add it to an App
/// that has `NetClientPlugin` (the relay's connection), the session plugin and an
/// `OwnershipPlugin::participant()`. Without an [`OwnershipConnection`] resource it does
/// nothing, and the ownership plugin uses the App's one connection as usual.
#[derive(Debug, Default, Clone, Copy)]
pub struct OwnershipConnectionPlugin;

/// The swap windows' systems.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Window {
    Open,
    Close,
}

impl Plugin for OwnershipConnectionPlugin {
    fn build(&self, app: &mut App) {
        let ready = resource_exists::<OwnershipConnection>.and_then(resource_exists::<RenetClient>);
        app.add_message::<NetTransportError>()
            .configure_sets(
                PreUpdate,
                (
                    Window::Open
                        .after(RenetReceive)
                        .before(OwnershipSet::Receive),
                    Window::Close
                        .after(OwnershipSet::Receive)
                        .before(DeterministicSet::ReadLocalInput)
                        .before(DeterministicSet::SessionUpdate),
                ),
            )
            .configure_sets(
                PostUpdate,
                (
                    Window::Open
                        .after(PhysicsSet::Writeback)
                        .before(OwnershipSet::Send),
                    Window::Close.after(OwnershipSet::Send).before(RenetSend),
                ),
            )
            .add_systems(
                PreUpdate,
                (
                    receive_and_swap_in
                        .in_set(Window::Open)
                        .run_if(ready.clone()),
                    swap_out.in_set(Window::Close).run_if(ready.clone()),
                ),
            )
            .add_systems(
                PostUpdate,
                (
                    swap_in.in_set(Window::Open).run_if(ready.clone()),
                    swap_out_and_send.in_set(Window::Close).run_if(ready),
                ),
            );
    }
}

/// Exchanges the App's `RenetClient` with the ownership connection's.
fn swap(world: &mut World, into_app: bool) {
    world.resource_scope(|world, mut connection: Mut<OwnershipConnection>| {
        if connection.swapped == into_app {
            return;
        }
        if let Some(mut app_client) = world.get_resource_mut::<RenetClient>() {
            std::mem::swap(&mut *app_client, &mut connection.client);
            connection.swapped = into_app;
        }
    });
}

/// `PreUpdate`: advances the ownership connection and its transport, then swaps it in.
fn receive_and_swap_in(world: &mut World) {
    let dt = {
        let clock = world
            .get_resource::<NetClock>()
            .copied()
            .unwrap_or_default();
        clock.delta(world.get_resource::<Time<Real>>())
    };
    world.resource_scope(|world, mut connection: Mut<OwnershipConnection>| {
        let connection = &mut *connection;
        if connection.swapped {
            return;
        }
        connection.client.update(dt);
        match connection.transport.update(dt, &mut connection.client) {
            Ok(()) => connection.reported = false,
            Err(error) => {
                let mut errors = world.resource_mut::<Messages<NetTransportError>>();
                connection.report(error, &mut errors);
            }
        }
    });
    swap(world, true);
}

fn swap_in(world: &mut World) {
    swap(world, true);
}

fn swap_out(world: &mut World) {
    swap(world, false);
}

/// `PostUpdate`: swaps the relay's connection back, then sends the ownership connection's
/// packets.
fn swap_out_and_send(world: &mut World) {
    swap(world, false);
    world.resource_scope(|world, mut connection: Mut<OwnershipConnection>| {
        let connection = &mut *connection;
        if connection.client.is_disconnected() {
            return;
        }
        if let Err(error) = connection.transport.send_packets(&mut connection.client) {
            let mut errors = world.resource_mut::<Messages<NetTransportError>>();
            connection.report(error, &mut errors);
        }
    });
}
