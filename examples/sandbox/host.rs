//! `sandbox host`: a dedicated server built from `simsync_server`'s library with this game —
//! one relay room of `--players`, authoritative with `--authoritative` (the room runs the
//! sandbox's verified world: `simsync::authority::LockstepAuthority`), a connect token file per
//! slot for `sandbox join --token`, the admin API's bearer token from `--admin-token-file` or a
//! random one written to `admin.token` beside the connect tokens. It drains and exits once the
//! room has ended (at once when every player left with a goodbye after the match: `completed`;
//! else when every player was
//! gone for the empty-room timeout) or on Ctrl-C / SIGTERM, and prints the room's numbers.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use simsync::relay::Resync;
use simsync_server::{
    DedicatedServer, RoomId, RoomState, ServerConfig, TokenClaims, TokenMinter, fingerprint_relay,
};

use crate::cli::HostArgs;
use crate::driver::{Failure, load_session, log_plugin};
use crate::network::{ClientSession, authority_factory};

/// The room's id.
const ROOM: RoomId = RoomId(1);
/// Connect tokens' client ids start here (one per slot).
const FIRST_CLIENT_ID: u64 = 0x5a4d_0000;

/// Runs `sandbox host` (module docs).
///
/// # Errors
/// Exit code 2 for a bad scene or token directory, 1 when a port cannot be bound.
pub fn run_host(args: &HostArgs) -> Result<ExitCode, Failure> {
    // Bevy's log plugin installs the process's log output (the server logs through `tracing`).
    bevy::app::App::new().add_plugins(log_plugin(args.quiet));
    let admin_token = admin_token(args)?;
    let mut config = ServerConfig::local(
        args.bind,
        args.ops,
        simsync_net::generate_private_key(),
        &admin_token.token,
    );
    config.public_addr = args.public_addr;
    config.rooms = vec![(Some(ROOM), crate::room_config::relay_room(args.players)?)];
    let server = if args.authoritative {
        let (game, _) = load_session(args.scene.as_deref(), None, args.players)?;
        let session = ClientSession {
            dump_dir: None,
            players: args.players,
            verify_predictions: false,
            rejoin: None,
        };
        let world = authority_factory(session, game)?;
        DedicatedServer::bind_with(config, move |relay, room| {
            fingerprint_relay(relay, room).with_authority(world(), Resync::On)
        })
    } else {
        DedicatedServer::bind(config)
    }
    .map_err(|e| Failure::run(e.to_string()))?;
    let minter = server.minter().expire_seconds(args.token_seconds);
    write_tokens(&minter, args.players, &args.tokens)?;
    let signal = server.drain_signal();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, signal.flag())
            .map_err(|e| Failure::run(format!("cannot watch signals: {e}")))?;
    }
    if !args.quiet {
        println!(
            "sandbox: host on udp {} (tokens name {}), http {} (admin token {}) ({} room of {} \
             players); tokens in {}; `sandbox join --token {}/slot0.token` ...",
            server.udp_addr(),
            server.public_addr(),
            args.ops,
            admin_token.source,
            if args.authoritative {
                "an authoritative"
            } else {
                "a"
            },
            args.players,
            args.tokens.display(),
            args.tokens.display(),
        );
    }
    let mut last = None;
    let mut shown = Instant::now();
    server
        .run(|server| {
            let Some(summary) = server.rooms().summary(ROOM) else {
                return;
            };
            if summary.state == RoomState::Ended && !signal.raised() {
                signal.raise();
            }
            if !args.quiet && shown.elapsed() >= Duration::from_secs(2) {
                shown = Instant::now();
                println!("{}", serde_json::to_string(&summary).unwrap_or_default());
            }
            last = Some(summary);
        })
        .map_err(|e| Failure::run(e.to_string()))?;
    let summary = serde_json::to_string_pretty(&last).unwrap_or_default();
    println!("room {}: {summary}", ROOM.0);
    Ok(ExitCode::SUCCESS)
}

/// The admin API's bearer token and where it came from (for the banner; never the token).
struct AdminToken {
    token: String,
    source: String,
}

/// The admin token of `--admin-token-file`, or a new random one written to
/// `<tokens>/admin.token` (owner-only on Unix).
fn admin_token(args: &HostArgs) -> Result<AdminToken, Failure> {
    if let Some(path) = &args.admin_token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::input(format!("--admin-token-file {}: {e}", path.display())))?;
        let token = crate::cli::admin_token_from(&text)
            .map_err(|e| Failure::input(format!("--admin-token-file {}: {e}", path.display())))?;
        let source = format!("from {}", path.display());
        return Ok(AdminToken { token, source });
    }
    let token = simsync_server::key_to_hex(&simsync_net::generate_private_key());
    std::fs::create_dir_all(&args.tokens)
        .map_err(|e| Failure::input(format!("cannot make {}: {e}", args.tokens.display())))?;
    let path = args.tokens.join("admin.token");
    write_private(&path, &token)
        .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
    let source = format!("in {}", path.display());
    Ok(AdminToken { token, source })
}

/// Writes `text` to `path`, readable by its owner only where the platform says so.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(path)?, text.as_bytes())
}

/// Tokens per slot besides the first, for a client that dropped to take its slot again (a
/// token is bound to the first address that uses it).
const SPARE_TOKENS: u64 = 2;

/// One connect token per slot, `dir/slotN.token`, and spares `dir/slotN-rejoinK.token`.
fn write_tokens(minter: &TokenMinter, players: u8, dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::input(format!("cannot make {}: {e}", dir.display())))?;
    for slot in 0..players {
        for k in 0..=SPARE_TOKENS {
            let claims = TokenClaims { room: ROOM, slot };
            let client_id = FIRST_CLIENT_ID + 0x100 * k + u64::from(slot);
            let bytes = minter
                .mint_bytes(client_id, claims)
                .map_err(|e| Failure::run(e.to_string()))?;
            let name = match k {
                0 => format!("slot{slot}.token"),
                k => format!("slot{slot}-rejoin{k}.token"),
            };
            let path = dir.join(name);
            std::fs::write(&path, bytes)
                .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
        }
    }
    Ok(())
}
