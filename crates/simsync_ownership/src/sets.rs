//! [`OwnershipSet`]: where the ownership systems run.

use bevy::prelude::*;

/// The system sets of the [`OwnershipPlugin`](crate::OwnershipPlugin):
///
/// | schedule | set | entity server | participant |
/// |---|---|---|---|
/// | `PreUpdate`, after `RenetReceive` | [`OwnershipSet::Receive`] | handshake, bids, releases, state updates (relayed), silence expiry, disconnects | handshake, grants, refusals, owner changes, relayed state applied to `Transform` + `Velocity` |
/// | `PostUpdate`, after Rapier's `PhysicsSet::Writeback`, before `RenetSend` | [`OwnershipSet::Send`] | — | observations → rules 6–14 → bids / releases; owned bodies' state updates |
///
/// Game code (scripts, the [user API](crate::OwnershipEntityCommandsExt)) runs in `Update`,
/// between the two. Rapier must run in `PostUpdate` (its default) so that the participant
/// observes the state it just simulated.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnershipSet {
    /// `PreUpdate`, after `RenetReceive`: everything received is handled.
    Receive,
    /// `PostUpdate`, after Rapier's writeback and before `RenetSend`: a participant observes its
    /// bodies, applies [rules 6–14](crate::rules) and sends bids, releases and state updates.
    Send,
}
