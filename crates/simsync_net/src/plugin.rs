//! The Bevy plugins that drive renet and the transports.

use std::time::Duration;

use bevy::ecs::schedule::SingleThreadedExecutor;
use bevy::prelude::*;
use bevy::time::Real;
use bevy_renet::{RenetClient, RenetReceive, RenetSend, RenetServer};

use crate::channels::connection_config;
use crate::error::NetError;
use crate::transport::{ClientTransport, ServerTransport};

/// Where the transports' `dt` comes from, per App.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub enum NetClock {
    /// `Time<Real>::delta()` (wall clock; 0 if Bevy's `TimePlugin` is missing).
    #[default]
    Real,
    /// This fixed step per `App::update`, regardless of the wall clock (simulated time).
    Fixed(Duration),
}

impl NetClock {
    /// A fixed step of `1 / hz` seconds (`Fixed(ZERO)` for `hz = 0`). 64 Hz is exactly
    /// 15.625 ms.
    pub fn fixed_hz(hz: u32) -> Self {
        if hz == 0 {
            NetClock::Fixed(Duration::ZERO)
        } else {
            NetClock::Fixed(Duration::from_nanos(1_000_000_000 / u64::from(hz)))
        }
    }

    /// The step for this frame.
    pub fn delta(&self, real: Option<&Time<Real>>) -> Duration {
        match self {
            NetClock::Real => real.map(Time::delta).unwrap_or_default(),
            NetClock::Fixed(step) => *step,
        }
    }
}

/// A transport failure, written by the plugins' systems (read with `MessageReader`).
#[derive(Message, Debug)]
pub struct NetTransportError {
    /// `true` if it came from the server transport, `false` from the client transport.
    pub server: bool,
    /// What went wrong.
    pub error: NetError,
}

/// Drives a `RenetServer` + [`ServerTransport`] pair; [`NetClientPlugin`] does the same for a
/// `RenetClient` + [`ClientTransport`].
///
/// The resources are bevy_renet 6's `RenetServer` / `RenetClient` (newtypes of renet's) plus
/// this crate's [`ServerTransport`] / [`ClientTransport`]. The systems run in bevy_renet's
/// system sets, so code written against bevy_renet orders the same way:
///
/// | schedule | set | server | client |
/// |---|---|---|---|
/// | `PreUpdate` | [`RenetReceive`] | `server.update(dt)`, then `transport.update(dt, server)` | `client.update(dt)`, then `transport.update(dt, client)` |
/// | `PostUpdate` | [`RenetSend`] | `transport.send_packets(server)` | `transport.send_packets(client)` |
/// | `Last` | — | on `AppExit`: disconnect everyone | on `AppExit`: disconnect |
///
/// Read messages in systems after `RenetReceive` (e.g. in `Update`) and send before `RenetSend`.
/// Each system runs only while both of its resources exist, so a resource can be inserted later
/// (e.g. when the player clicks "join") and removed to stop.
///
/// `dt` comes from the [`NetClock`] resource: the wall clock (`Time<Real>`, needs Bevy's
/// `TimePlugin`) or a fixed simulated step per `App::update`, which makes multi-App tests
/// reproducible. Do not add bevy_renet's own `RenetServerPlugin` / `RenetClientPlugin` /
/// `Netcode*Plugin` as well: they would update renet a second time with the wall clock.
///
/// Transport errors are logged and written as [`NetTransportError`] messages; the client writes
/// one only when the connection goes down, not every frame after.
///
/// # Example
///
/// A server App and a client App on one [`MemoryNetwork`](crate::MemoryNetwork), stepped by
/// hand with a fixed 64 Hz clock:
///
/// ```
/// use bevy::prelude::*;
/// use simsync_net::prelude::*;
///
/// let network = MemoryNetwork::perfect(7);
/// let mut server = App::new();
/// server
///     .add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
///     .insert_net_server(network.server_transport()?);
/// let mut client = App::new();
/// client
///     .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
///     .insert_net_client(network.client_transport(1)?);
/// client
///     .world_mut()
///     .resource_mut::<RenetClient>()
///     .send_msg(&ClientMessage::Hello(Hello::new(Protocols::SESSION, "ada")))?;
/// for _ in 0..3 {
///     server.update();
///     client.update();
/// }
/// let mut stats = DecodeStats::default();
/// let received = server.world_mut().resource_mut::<RenetServer>().receive_msgs(&mut stats);
/// assert!(matches!(received[0].message, Ok(ClientMessage::Hello(_))));
/// # Ok::<(), simsync_net::NetError>(())
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct NetServerPlugin {
    clock: Option<NetClock>,
}

impl NetServerPlugin {
    /// Uses `clock`, inserting it as the App's [`NetClock`] resource (replacing one that is
    /// there). Without this the App's existing `NetClock` is kept, or [`NetClock::Real`] is
    /// inserted.
    #[must_use]
    pub fn with_clock(mut self, clock: NetClock) -> Self {
        self.clock = Some(clock);
        self
    }
}

/// Drives a `RenetClient` + [`ClientTransport`] pair: the client side of [`NetServerPlugin`]
/// (same schedules and sets, same [`NetClock`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct NetClientPlugin {
    clock: Option<NetClock>,
}

impl NetClientPlugin {
    /// Uses `clock`; see [`NetServerPlugin::with_clock`].
    #[must_use]
    pub fn with_clock(mut self, clock: NetClock) -> Self {
        self.clock = Some(clock);
        self
    }
}

fn init_clock(app: &mut App, clock: Option<NetClock>) {
    match clock {
        Some(clock) => {
            app.insert_resource(clock);
        }
        None => {
            app.init_resource::<NetClock>();
        }
    }
    app.add_message::<NetTransportError>()
        .register_type::<NetClock>()
        .register_type::<crate::DecodeStats>();
}

impl Plugin for NetServerPlugin {
    fn build(&self, app: &mut App) {
        init_clock(app, self.clock);
        app.add_systems(
            PreUpdate,
            server_receive_system
                .in_set(RenetReceive)
                .run_if(server_ready),
        )
        .add_systems(
            PostUpdate,
            server_send_system.in_set(RenetSend).run_if(server_ready),
        )
        .add_systems(Last, server_disconnect_on_exit.run_if(server_ready));
    }
}

impl Plugin for NetClientPlugin {
    fn build(&self, app: &mut App) {
        init_clock(app, self.clock);
        app.init_resource::<ClientErrorReported>()
            .add_systems(
                PreUpdate,
                client_receive_system
                    .in_set(RenetReceive)
                    .run_if(client_ready),
            )
            .add_systems(
                PostUpdate,
                client_send_system.in_set(RenetSend).run_if(client_ready),
            )
            .add_systems(Last, client_disconnect_on_exit.run_if(client_ready));
    }
}

/// Run condition: a `RenetServer` and a [`ServerTransport`] exist.
pub fn server_ready(
    server: Option<Res<RenetServer>>,
    transport: Option<Res<ServerTransport>>,
) -> bool {
    server.is_some() && transport.is_some()
}

/// Run condition: a `RenetClient` and a [`ClientTransport`] exist.
pub fn client_ready(
    client: Option<Res<RenetClient>>,
    transport: Option<Res<ClientTransport>>,
) -> bool {
    client.is_some() && transport.is_some()
}

/// `PreUpdate`, [`RenetReceive`]: advances renet and the transport by the [`NetClock`] step and
/// receives.
fn server_receive_system(
    clock: Res<NetClock>,
    real: Option<Res<Time<Real>>>,
    mut server: ResMut<RenetServer>,
    mut transport: ResMut<ServerTransport>,
    mut errors: MessageWriter<NetTransportError>,
) {
    let dt = clock.delta(real.as_deref());
    server.update(dt);
    if let Err(error) = transport.update(dt, &mut server) {
        warn!("server transport: {error}");
        errors.write(NetTransportError {
            server: true,
            error,
        });
    }
}

/// `PostUpdate`, [`RenetSend`]: sends what renet has queued.
fn server_send_system(mut server: ResMut<RenetServer>, mut transport: ResMut<ServerTransport>) {
    transport.send_packets(&mut server);
}

/// `Last`: on `AppExit`, disconnects every client.
fn server_disconnect_on_exit(
    exit: MessageReader<AppExit>,
    mut server: ResMut<RenetServer>,
    mut transport: ResMut<ServerTransport>,
) {
    if !exit.is_empty() {
        transport.disconnect_all(&mut server);
    }
}

/// Whether the client transport's current failure was logged and written already: one failure
/// (a lost or refused connection) is one warning and one [`NetTransportError`], whichever of
/// the receive and send systems meets it first. An expected close
/// ([`ClientTransport::close_expected`]: the game left, or the client closed the connection
/// itself) is no failure: logged at debug level only, and no [`NetTransportError`].
#[derive(Resource, Default)]
struct ClientErrorReported(bool);

impl ClientErrorReported {
    /// Logs and writes `error` unless the current failure was reported already, or the close
    /// was `expected`.
    fn report(
        &mut self,
        error: NetError,
        expected: bool,
        errors: &mut MessageWriter<NetTransportError>,
    ) {
        if std::mem::replace(&mut self.0, true) {
            return;
        }
        if expected {
            debug!("client transport: connection closed as expected ({error})");
            return;
        }
        warn!("client transport: {error}");
        errors.write(NetTransportError {
            server: false,
            error,
        });
    }
}

/// `PreUpdate`, [`RenetReceive`]: advances renet and the transport by the [`NetClock`] step and
/// receives.
fn client_receive_system(
    clock: Res<NetClock>,
    real: Option<Res<Time<Real>>>,
    mut client: ResMut<RenetClient>,
    mut transport: ResMut<ClientTransport>,
    mut errors: MessageWriter<NetTransportError>,
    mut reported: ResMut<ClientErrorReported>,
) {
    let dt = clock.delta(real.as_deref());
    client.update(dt);
    match transport.update(dt, &mut client) {
        Ok(()) => reported.0 = false,
        Err(error) => reported.report(error, transport.close_expected(), &mut errors),
    }
}

/// `PostUpdate`, [`RenetSend`]: sends what renet has queued.
fn client_send_system(
    mut client: ResMut<RenetClient>,
    mut transport: ResMut<ClientTransport>,
    mut errors: MessageWriter<NetTransportError>,
    mut reported: ResMut<ClientErrorReported>,
) {
    if client.is_disconnected() {
        return;
    }
    if let Err(error) = transport.send_packets(&mut client) {
        reported.report(error, transport.close_expected(), &mut errors);
    }
}

/// `Last`: on `AppExit`, disconnects.
fn client_disconnect_on_exit(exit: MessageReader<AppExit>, mut transport: ResMut<ClientTransport>) {
    if !exit.is_empty() {
        transport.disconnect();
    }
}

/// Inserting the resources the plugins drive.
pub trait NetAppExt {
    /// Inserts a `RenetServer` with [`connection_config`] and `transport` as the
    /// [`ServerTransport`].
    fn insert_net_server(&mut self, transport: impl Into<ServerTransport>) -> &mut Self;

    /// Inserts a `RenetClient` with [`connection_config`] and `transport` as the
    /// [`ClientTransport`].
    fn insert_net_client(&mut self, transport: impl Into<ClientTransport>) -> &mut Self;
}

impl NetAppExt for App {
    fn insert_net_server(&mut self, transport: impl Into<ServerTransport>) -> &mut Self {
        self.insert_resource(RenetServer::new(connection_config()))
            .insert_resource(transport.into())
    }

    fn insert_net_client(&mut self, transport: impl Into<ClientTransport>) -> &mut Self {
        self.insert_resource(RenetClient::new(connection_config()))
            .insert_resource(transport.into())
    }
}

/// Runs every schedule `app` has on its own thread, one system after another: for an App that
/// is one of many a server runs on one worker thread (an entity server's room, a benchmark's
/// App), where the multi-threaded executor's hand-offs to the task pool (waking threads, a
/// lock per system) cost more than the systems themselves. Call it after the App's plugins
/// are added and `App::finish` ran: a schedule added later keeps Bevy's default executor.
pub fn single_threaded_schedules(app: &mut App) {
    let mut schedules = app.world_mut().resource_mut::<Schedules>();
    for (_, schedule) in schedules.iter_mut() {
        schedule.set_executor(SingleThreadedExecutor::new());
    }
}

/// Creates Bevy's global task pools (compute, async compute, I/O) as `TaskPoolPlugin` does,
/// without the system that plugin adds to `Last` to tick the pools' thread-local executors
/// at the end of every update. For an App that is one of many a server runs on one worker
/// thread and that spawns no thread-local tasks (an entity server's room, a benchmark's App):
/// there that tick is a fixed cost of every update for nothing. Use it instead of
/// `TaskPoolPlugin`, before the App's other plugins; pools already created are kept.
pub fn task_pools_without_local_tick() {
    bevy::app::TaskPoolOptions::default().create_default_pools();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryNetwork;

    #[test]
    fn task_pools_without_local_tick_makes_the_pools_and_no_last_system() {
        task_pools_without_local_tick();
        assert!(bevy::tasks::ComputeTaskPool::try_get().is_some());
        assert!(bevy::tasks::AsyncComputeTaskPool::try_get().is_some());
        assert!(bevy::tasks::IoTaskPool::try_get().is_some());
        let mut app = App::new();
        app.finish();
        app.update();
        let schedules = app.world().resource::<Schedules>();
        let last = schedules.get(Last).map_or(0, |s| s.systems_len());
        // With the plugin, one system more runs in Last: its tick.
        let mut with_plugin = App::new();
        with_plugin.add_plugins(bevy::app::TaskPoolPlugin::default());
        with_plugin.finish();
        with_plugin.update();
        let schedules = with_plugin.world().resource::<Schedules>();
        assert_eq!(schedules.get(Last).map_or(0, |s| s.systems_len()), last + 1);
    }

    #[derive(Resource, Default)]
    struct Errors(Vec<bool>);

    fn collect_errors(mut reader: MessageReader<NetTransportError>, mut errors: ResMut<Errors>) {
        errors.0.extend(reader.read().map(|e| e.server));
    }

    #[test]
    fn fixed_clock_is_one_over_hz_and_real_clock_without_time_is_zero() {
        assert_eq!(
            NetClock::fixed_hz(64),
            NetClock::Fixed(Duration::from_micros(15_625))
        );
        assert_eq!(NetClock::fixed_hz(0), NetClock::Fixed(Duration::ZERO));
        assert_eq!(NetClock::Real.delta(None), Duration::ZERO);
    }

    #[test]
    fn plugins_connect_and_report_a_lost_connection_once() {
        let network = MemoryNetwork::perfect(3);
        let clock = NetClock::fixed_hz(64);
        let mut server = App::new();
        server
            .add_plugins(NetServerPlugin::default().with_clock(clock))
            .insert_net_server(network.server_transport().unwrap());
        let mut client = App::new();
        client
            .add_plugins(NetClientPlugin::default().with_clock(clock))
            .init_resource::<Errors>()
            .add_systems(Update, collect_errors)
            .insert_net_client(network.client_transport(4).unwrap());
        // Nothing runs without the resources.
        let mut idle = App::new();
        idle.add_plugins(NetServerPlugin::default());
        idle.update();

        for _ in 0..2 {
            server.update();
            client.update();
        }
        assert!(client.world().resource::<RenetClient>().is_connected());
        assert_eq!(
            server.world().resource::<RenetServer>().clients_id(),
            vec![4]
        );

        server
            .world_mut()
            .resource_mut::<RenetServer>()
            .disconnect(4);
        for _ in 0..5 {
            server.update();
            client.update();
        }
        assert!(client.world().resource::<RenetClient>().is_disconnected());
        assert_eq!(client.world().resource::<Errors>().0, vec![false]);
        assert!(
            server
                .world()
                .resource::<RenetServer>()
                .clients_id()
                .is_empty()
        );
    }
}
