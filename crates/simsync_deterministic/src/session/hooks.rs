//! What a verified-tick hook returns ([`HookFlow`]) and the message a stop is reported with
//! ([verified-tick hooks](crate::rules#verified-tick-hooks)). The hook trait,
//! [`VerifiedTickHook`](super::VerifiedTickHook), and what it sees,
//! [`VerifiedTick`](super::VerifiedTick), are defined with the session that owns the hooks.

use bevy::prelude::*;

use crate::tick::Tick;

/// Whether verification goes on after a [`VerifiedTickHook`](super::VerifiedTickHook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookFlow {
    /// Go on verifying.
    Continue,
    /// Stop verifying at this tick, for good: the tick stays verified (every other hook still
    /// sees it), no later tick is verified, and the session writes a [`VerificationStopped`]
    /// message with this reason. A replay playback stops like this at a checksum mismatch.
    Stop(String),
}

/// Verification was stopped by a [`VerifiedTickHook`](super::VerifiedTickHook) that returned [`HookFlow::Stop`]: the
/// verified world stays at `tick` (written once; see
/// [`DeterministicSession::verification_stopped`](super::DeterministicSession::verification_stopped)).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct VerificationStopped {
    /// The last verified tick.
    pub tick: Tick,
    /// The reason the hook gave.
    pub reason: String,
}
