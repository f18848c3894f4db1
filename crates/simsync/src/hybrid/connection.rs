//! A hybrid App's second connection: the ownership participant's, to the entity server, beside
//! the session's connection to the relay ([`OwnershipConnection`], [`OwnershipConnectionPlugin`]).

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

/// Drives a hybrid App's [`OwnershipConnection`]: add it to an App that has `NetClientPlugin`
/// (the relay's connection), the session plugin and an `OwnershipPlugin::participant()`.
/// Without an [`OwnershipConnection`] resource it does nothing, and the ownership plugin uses
/// the App's one connection as usual.
///
/// Both the session and [`OwnershipPlugin`](crate::OwnershipPlugin) read the App's one
/// `RenetClient`. The App's own `RenetClient` (and `ClientTransport`, driven by
/// `NetClientPlugin`) is the relay's; the entity server's lives in [`OwnershipConnection`] and
/// is swapped into the App's `RenetClient` while, and only while, the ownership systems run:
///
/// | schedule | before the ownership set | [`OwnershipSet`] | after it |
/// |---|---|---|---|
/// | `PreUpdate`, after `RenetReceive`, before [`DeterministicSet::ReadLocalInput`] | advance the ownership connection and its transport by the [`NetClock`] step, swap it in | `Receive` | swap the relay's back |
/// | `PostUpdate`, after Rapier's writeback, before `RenetSend` | swap it in | `Send` | swap the relay's back, send the ownership connection's packets |
///
/// The session's systems run after the first window and never inside either, so they always
/// see the relay's connection.
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

#[cfg(test)]
mod tests {
    use super::*;
    use simsync_net::bevy_renet::RenetServer;
    use simsync_net::{MemoryNetwork, NetAppExt, NetChannel, NetClientPlugin, NetServerPlugin};

    /// A client App: relay connection as client 4, entity server connection as client 9.
    fn client(relay_net: &MemoryNetwork, entity_net: &MemoryNetwork) -> App {
        let mut client = App::new();
        client
            .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
            .add_plugins(OwnershipConnectionPlugin)
            .insert_net_client(relay_net.client_transport(4).expect("relay transport"))
            .insert_resource(OwnershipConnection::new(
                entity_net.client_transport(9).expect("entity transport"),
            ));
        client
    }

    fn server(network: &MemoryNetwork) -> App {
        let mut app = App::new();
        app.add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
            .insert_net_server(network.server_transport().expect("server transport"));
        app
    }

    fn send(text: &'static str) -> impl Fn(ResMut<RenetClient>) {
        move |mut client: ResMut<RenetClient>| {
            if client.is_connected() {
                client.send_message(NetChannel::Control.id(), text.as_bytes().to_vec());
            }
        }
    }

    fn received(server: &mut App, client: u64) -> Vec<String> {
        let mut renet = server.world_mut().resource_mut::<RenetServer>();
        std::iter::from_fn(|| renet.receive_message(client, NetChannel::Control.id()))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    }

    #[test]
    fn the_ownership_systems_talk_to_the_entity_server_and_the_rest_to_the_relay() {
        let (relay_net, entity_net) = (MemoryNetwork::perfect(1), MemoryNetwork::perfect(2));
        let (mut relay, mut entity) = (server(&relay_net), server(&entity_net));
        let mut client = client(&relay_net, &entity_net);
        client
            .add_systems(
                PreUpdate,
                send("ownership in").in_set(OwnershipSet::Receive),
            )
            .add_systems(PostUpdate, send("ownership out").in_set(OwnershipSet::Send))
            .add_systems(Update, send("game"));
        for _ in 0..4 {
            relay.update();
            entity.update();
            client.update();
        }
        let connection = client.world().resource::<OwnershipConnection>();
        assert!(connection.is_connected());
        assert_eq!(connection.failures(), 0);
        let clients = |app: &App| app.world().resource::<RenetServer>().clients_id();
        assert_eq!((clients(&relay), clients(&entity)), (vec![4], vec![9]));
        let (to_relay, to_entity) = (received(&mut relay, 4), received(&mut entity, 9));
        assert!(!to_relay.is_empty() && !to_entity.is_empty());
        assert!(to_relay.iter().all(|m| m == "game"), "{to_relay:?}");
        assert!(
            to_entity.iter().any(|m| m == "ownership in")
                && to_entity.iter().any(|m| m == "ownership out")
                && to_entity.iter().all(|m| m != "game"),
            "{to_entity:?}"
        );
    }

    #[derive(Resource, Default)]
    struct Seen(usize);

    #[test]
    fn a_lost_entity_server_is_one_transport_error_and_the_relay_stays_up() {
        let (relay_net, entity_net) = (MemoryNetwork::perfect(1), MemoryNetwork::perfect(2));
        let (mut relay, mut entity) = (server(&relay_net), server(&entity_net));
        let mut client = client(&relay_net, &entity_net);
        client.init_resource::<Seen>().add_systems(
            Update,
            |mut seen: ResMut<Seen>, mut errors: MessageReader<NetTransportError>| {
                seen.0 += errors.read().filter(|e| !e.server).count();
            },
        );
        for _ in 0..3 {
            relay.update();
            entity.update();
            client.update();
        }
        entity
            .world_mut()
            .resource_mut::<RenetServer>()
            .disconnect(9);
        for _ in 0..6 {
            relay.update();
            entity.update();
            client.update();
        }
        let connection = client.world().resource::<OwnershipConnection>();
        assert!(!connection.is_connected());
        assert_eq!(connection.failures(), 1);
        assert_eq!(
            client.world().resource::<Seen>().0,
            1,
            "one NetTransportError"
        );
        assert!(client.world().resource::<RenetClient>().is_connected());
    }
}
