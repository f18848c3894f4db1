//! [`LockstepAuthority`]: the verified world of an authoritative relay room
//! ([`simsync_relay::Authority`]), run from the confirmed input sets in a headless lockstep
//! session of the game's own [`DeterministicPlugin`] on a thread of its own
//! ([authoritative rooms](simsync_relay::rules#authoritative-rooms)).
//!
//! The relay hands it each confirmed set as it confirms it and never waits for it: the world
//! simulates on its thread and its checksums come back as they are computed (the judge waits
//! for them, up to its checksum timeout). A snapshot is taken on request, at the world's
//! newest tick, and comes back the same way. (Blocking the relay's system on the world's
//! thread could starve Bevy's task pool, which both use.)
//!
//! An authoritative room serves snapshots of this world (late joiners, rejoins, resyncs), so
//! the game must be snapshottable: [`LockstepAuthority::factory`] builds the world once and
//! refuses a game with a registered component or resource that cannot go into a snapshot
//! ([`SessionError::NotSerializable`] naming it) when the room is set up, not at its first
//! snapshot.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bevy::prelude::*;
use simsync_deterministic::{
    DeterministicPlugin, DeterministicSession, LocalSessionConfig, SessionClock, SessionError,
    SessionMode, SessionSetupError, SessionStats, SimulationWorlds, TickInputSource,
    capture_snapshot,
};
use simsync_net::{InputSet, SimInput, Tick};
use simsync_relay::{Authority, AuthorityFactory, AuthoritySnapshot};

/// Builds the game's session plugin for the authority (the same closure a client uses).
pub type PluginMaker<I> = Arc<dyn Fn() -> DeterministicPlugin<I> + Send + Sync>;

/// What the relay asks of the world's thread.
enum Command {
    Tick(Tick, InputSet),
    Snapshot,
    Restart,
    Stop,
}

/// What the world's thread answers; `generation` counts restarts, so answers of an earlier
/// match are dropped.
enum Reply {
    Checksum {
        generation: u32,
        tick: Tick,
        checksum: u64,
    },
    Failed {
        generation: u32,
        error: String,
    },
    Snapshot {
        generation: u32,
        snapshot: Result<AuthoritySnapshot, String>,
    },
}

/// The inputs of the tick being simulated, read by the session's [`TickInputSource`].
type TickInputs<I> = Arc<Mutex<Vec<I>>>;

/// The verified world of an authoritative relay room on its own thread.
pub struct LockstepAuthority {
    commands: Sender<Command>,
    replies: Mutex<Receiver<Reply>>,
    generation: u32,
    /// A failure the thread reported, not yet returned.
    failure: Option<String>,
    /// Checksums received, not yet taken.
    checksums: Vec<(Tick, u64)>,
    /// A snapshot received, not yet taken.
    snapshot: Option<Result<AuthoritySnapshot, String>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockstepAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockstepAuthority")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl LockstepAuthority {
    /// Starts the world of `players` players on a new thread, with the session plugin `make`
    /// builds (the game's; its session is turned into a lockstep local session of every
    /// player, stepped one tick per update, a checksum every tick). A world that fails
    /// [`Self::check`] answers its first tick with that error (the relay stops it and judges
    /// by majority); [`Self::factory`] refuses such a game before any world starts.
    pub fn spawn<I: SimInput>(players: u8, make: PluginMaker<I>) -> Self {
        let (commands, inbox) = channel();
        let (outbox, replies) = channel();
        let thread = std::thread::Builder::new()
            .name("simsync-authority".into())
            .spawn(move || serve::<I>(players, &make, &inbox, &outbox))
            .ok();
        Self {
            commands,
            replies: Mutex::new(replies),
            generation: 0,
            failure: None,
            checksums: Vec::new(),
            snapshot: None,
            thread,
        }
    }

    /// A factory for [`DeterministicServerPlugin::authority`](simsync_relay::DeterministicServerPlugin::authority)
    /// (or the dedicated server's rooms): each call starts a new world. The game is checked
    /// first ([`Self::check`]), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`Self::check`]'s: the game's world cannot be built, or cannot be snapshotted
    /// ([`SessionError::NotSerializable`] naming the first type that cannot).
    pub fn factory<I: SimInput>(
        players: u8,
        make: PluginMaker<I>,
    ) -> Result<AuthorityFactory, SessionError> {
        Self::check::<I>(players, &make)?;
        Ok(Arc::new(move || {
            Box::new(Self::spawn::<I>(players, Arc::clone(&make)))
        }))
    }

    /// Builds the world of `players` players with `make`'s plugin, as [`Self::spawn`] does,
    /// and checks that it can serve the room: built without a setup error, and every
    /// registered component and resource can go into a snapshot
    /// ([`SimulationWorlds::unserializable_types`]). The world is dropped after.
    ///
    /// # Errors
    ///
    /// The world's setup error ([`SessionSetupError`]), [`SessionError::WorldsNotBuilt`], or
    /// [`SessionError::NotSerializable`] naming the first type that cannot be snapshotted.
    pub fn check<I: SimInput>(players: u8, make: &PluginMaker<I>) -> Result<(), SessionError> {
        let inputs: TickInputs<I> = Arc::new(Mutex::new(vec![I::default(); usize::from(players)]));
        check_world(&world_app(players, make, &inputs))
    }

    /// Takes every answer waiting, without blocking, keeping those of the current match.
    fn drain(&mut self) {
        let Ok(replies) = self.replies.get_mut() else {
            self.failure = Some("the authority's answers are poisoned".into());
            return;
        };
        while let Ok(reply) = replies.try_recv() {
            match reply {
                Reply::Checksum {
                    generation,
                    tick,
                    checksum,
                } if generation == self.generation => self.checksums.push((tick, checksum)),
                Reply::Failed { generation, error } if generation == self.generation => {
                    self.failure = Some(error);
                }
                Reply::Snapshot {
                    generation,
                    snapshot,
                } if generation == self.generation => self.snapshot = Some(snapshot),
                _ => {}
            }
        }
    }

    fn send(&mut self, command: Command) -> Result<(), String> {
        self.commands
            .send(command)
            .map_err(|_| "the authority's thread is gone".to_string())
    }
}

impl Authority for LockstepAuthority {
    fn confirmed(&mut self, tick: Tick, set: &InputSet) -> Result<(), String> {
        self.drain();
        if let Some(error) = self.failure.take() {
            return Err(error);
        }
        self.send(Command::Tick(tick, set.clone()))
    }

    fn checksums(&mut self) -> Result<Vec<(Tick, u64)>, String> {
        self.drain();
        match self.failure.take() {
            Some(error) => Err(error),
            None => Ok(std::mem::take(&mut self.checksums)),
        }
    }

    fn request_snapshot(&mut self) {
        if let Err(error) = self.send(Command::Snapshot) {
            self.snapshot = Some(Err(error));
        }
    }

    fn take_snapshot(&mut self) -> Option<Result<AuthoritySnapshot, String>> {
        self.drain();
        self.snapshot.take()
    }

    fn restart(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.checksums.clear();
        self.snapshot = None;
        self.failure = self.send(Command::Restart).err();
    }
}

impl Drop for LockstepAuthority {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The world's thread: builds the App, then simulates each tick it is sent.
fn serve<I: SimInput>(
    players: u8,
    make: &PluginMaker<I>,
    inbox: &Receiver<Command>,
    outbox: &Sender<Reply>,
) {
    let inputs: TickInputs<I> = Arc::new(Mutex::new(vec![I::default(); usize::from(players)]));
    let mut app = world_app(players, make, &inputs);
    let mut setup = check_world(&app).map_err(|e| format!("the world cannot serve the room: {e}"));
    let mut generation = 0u32;
    let mut connected = vec![true; usize::from(players)];
    while let Ok(command) = inbox.recv() {
        let reply = match command {
            Command::Tick(tick, set) => {
                let simulated = setup
                    .clone()
                    .and_then(|()| simulate(&mut app, &inputs, &mut connected, tick, &set));
                match simulated {
                    Ok(checksum) => Reply::Checksum {
                        generation,
                        tick,
                        checksum,
                    },
                    Err(error) => Reply::Failed { generation, error },
                }
            }
            Command::Snapshot => Reply::Snapshot {
                generation,
                snapshot: setup.clone().and_then(|()| snapshot::<I>(&mut app)),
            },
            Command::Restart => {
                generation = generation.wrapping_add(1);
                app = world_app(players, make, &inputs);
                setup =
                    check_world(&app).map_err(|e| format!("the world cannot serve the room: {e}"));
                connected = vec![true; usize::from(players)];
                continue;
            }
            Command::Stop => return,
        };
        if outbox.send(reply).is_err() {
            return;
        }
    }
}

/// The authority's App: the game's plugin as a lockstep local session of every player, one
/// tick per update, a checksum every tick, its inputs read from `inputs`.
fn world_app<I: SimInput>(players: u8, make: &PluginMaker<I>, inputs: &TickInputs<I>) -> App {
    let plugin = make().players(players).edit_config(|c| {
        c.mode = SessionMode::Lockstep;
        c.clock = SessionClock::Stepped {
            ticks_per_update: 1,
        };
        c.input_delay = 0;
        c.checksum_interval = 1;
        c.verify_predictions = false;
        c.local = LocalSessionConfig {
            latency_ticks: vec![0],
            jitter_ticks: 0,
            seed: 0,
            known_players: (0..players).collect(),
        };
        c.network = None;
    });
    let source = Arc::clone(inputs);
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(plugin)
        .insert_resource(TickInputSource::<I>::new(move |player, _tick| {
            source
                .lock()
                .ok()
                .and_then(|inputs| inputs.get(usize::from(player)).cloned())
                .unwrap_or_default()
        }));
    app.finish();
    app.cleanup();
    app
}

/// Whether the built world `app` can serve an authoritative room: no setup error, and every
/// registered type snapshottable (the first that is not is named).
fn check_world(app: &App) -> Result<(), SessionError> {
    let world = app.world();
    if let Some(error) = world.get_resource::<SessionSetupError>() {
        return Err(error.0.clone());
    }
    let worlds = world
        .get_resource::<SimulationWorlds>()
        .ok_or(SessionError::WorldsNotBuilt)?;
    match worlds.unserializable_types().first().copied() {
        Some(type_name) => Err(SessionError::NotSerializable { type_name }),
        None => Ok(()),
    }
}

/// Simulates `tick` with `set`: decodes the inputs, marks the players whose connection
/// changed, steps one update and returns the verified world's checksum of the tick.
fn simulate<I: SimInput>(
    app: &mut App,
    inputs: &TickInputs<I>,
    connected: &mut [bool],
    tick: Tick,
    set: &InputSet,
) -> Result<u64, String> {
    {
        let mut current = inputs.lock().map_err(|e| e.to_string())?;
        for (slot, bytes) in set.inputs.iter().enumerate() {
            if let Some(input) = current.get_mut(slot) {
                *input = simsync_net::decode::<I>(bytes)
                    .map_err(|e| format!("tick {tick}: player {slot}'s input: {e}"))?;
            }
        }
    }
    for (slot, was) in connected.iter_mut().enumerate() {
        let now = !set.is_disconnected(slot);
        if now != *was {
            *was = now;
            let mut session = app.world_mut().resource_mut::<DeterministicSession<I>>();
            session
                .set_player_connected(slot as u8, now, tick)
                .map_err(|e| format!("tick {tick}: {e}"))?;
        }
    }
    app.update();
    let stats = app.world().resource::<SessionStats>();
    match stats.checksum_history.last() {
        Some(last) if last.tick == tick => Ok(last.checksum),
        _ => Err(format!(
            "tick {tick} was not verified (the world is at tick {})",
            stats.verified_tick
        )),
    }
}

/// A snapshot of the world at its verified tick.
fn snapshot<I: SimInput>(app: &mut App) -> Result<AuthoritySnapshot, String> {
    let snapshot = capture_snapshot::<I>(app.world_mut()).map_err(|e| e.to_string())?;
    Ok(AuthoritySnapshot {
        tick: snapshot.header.tick,
        checksum: snapshot.header.checksum,
        bytes: snapshot.encode(),
    })
}
