//! [`OwnershipEntityCommandsExt`]: the participant's user API on `commands.entity(body)`.

use bevy::prelude::*;

use crate::components::{Held, Poked, Uninterested};

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
/// [`OwnershipSet::Send`](crate::OwnershipSet::Send) systems turn the marks into bids at the
/// next observation. The server decides; its answers arrive as
/// [`OwnershipChanged`](crate::OwnershipChanged) and [`BidRefused`](crate::BidRefused)
/// messages. A bid that cannot win against the owner the participant knows of (a poke on a body
/// held at GRAB, say) is not sent: its `BidRefused` (`by: RefusedBy::Participant`) is written in
/// the same frame ([ownership rule 6](crate::rules)). Rule numbers refer to the [ownership
/// rules](crate::rules).
pub trait OwnershipEntityCommandsExt {
    /// A script changed the body (impulse, teleport, ...) this frame: bid POKE for it
    /// ([ownership rule 8](crate::rules)), unless already owned at POKE or more.
    fn poke(&mut self) -> &mut Self;
    /// This participant holds the body from now on: bid GRAB ([ownership rule
    /// 10](crate::rules)), or raise the owned priority to GRAB; a held body is never released
    /// at rest.
    fn grab(&mut self) -> &mut Self;
    /// Stops holding the body. Ownership stays (at GRAB) until the body comes to rest and is
    /// released ([ownership rule 12](crate::rules)) or is yielded.
    fn release_grab(&mut self) -> &mut Self;
    /// This participant is no longer interested in the body: an owner drops to YIELD
    /// ([ownership rule 13](crate::rules)) so others may take it at once ([ownership rule
    /// 14](crate::rules)); also stops holding it.
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
