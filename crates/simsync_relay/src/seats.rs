//! The relay's seat rule: which player slot a `Hello` gets, a new one or its own again by a
//! reconnect token ([rejoining](crate::rules#rejoining-a-running-session)). Pure data, no I/O.

use simsync_net::{ReconnectToken, ReconnectTokens, RejectReason};

/// A player slot as the seat rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotView {
    /// A connection is bound to the slot.
    pub seated: bool,
    /// The slot's player counts as connected (seated and not silent).
    pub connected: bool,
    /// A player was ever seated in the slot (it has a reconnect token): only its own token
    /// takes it again.
    pub claimed: bool,
}

/// Where a `Hello` is seated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seat {
    /// A free slot, before the session started.
    New(u8),
    /// The slot of the reconnect token, whose player is gone.
    Rejoin(u8),
    /// A slot no player ever took, in a running session that admits late joiners.
    Late(u8),
}

impl Seat {
    /// The slot.
    pub(crate) fn slot(self) -> u8 {
        match self {
            Seat::New(slot) | Seat::Rejoin(slot) | Seat::Late(slot) => slot,
        }
    }
}

/// The seat of a `Hello` with `reconnect` (its token, if any), given the slots and whether the
/// session `started`:
///
/// - with a token: its slot if the token is the slot's current one
///   ([`RejectReason::BadReconnectToken`] otherwise, also for a slot that does not exist) and
///   the slot's player is not connected ([`RejectReason::SlotStillConnected`] otherwise);
/// - without: the first slot no connection holds while the session has not started; after
///   the start, the first slot no player ever took when `late_join` (the relay serves
///   snapshots), else [`RejectReason::SessionStarted`]; [`RejectReason::ServerFull`] when no
///   such slot is left.
///
/// # Errors
///
/// The reason to refuse the `Hello`.
pub(crate) fn choose_seat(
    slots: &[SlotView],
    started: bool,
    late_join: bool,
    reconnect: Option<ReconnectToken>,
    tokens: &ReconnectTokens,
) -> Result<Seat, RejectReason> {
    if let Some(presented) = reconnect {
        tokens.check(presented)?;
        let slot = slots.get(usize::from(presented.slot));
        return match slot {
            Some(view) if !view.connected => Ok(Seat::Rejoin(presented.slot)),
            Some(_) => Err(RejectReason::SlotStillConnected {
                slot: presented.slot,
            }),
            None => Err(RejectReason::BadReconnectToken {
                slot: presented.slot,
            }),
        };
    }
    if started && late_join {
        return slots
            .iter()
            .position(|s| !s.seated && !s.claimed)
            .and_then(|i| u8::try_from(i).ok())
            .map(Seat::Late)
            .ok_or(RejectReason::ServerFull);
    }
    if started {
        return Err(RejectReason::SessionStarted);
    }
    slots
        .iter()
        .position(|s| !s.seated)
        .and_then(|i| u8::try_from(i).ok())
        .map(Seat::New)
        .ok_or(RejectReason::ServerFull)
}

/// The seat of a `Hello` from a connection whose slot was assigned before it said hello (a
/// dedicated server reads it from the client's connect token, which authenticates it):
///
/// - a slot that does not exist: [`RejectReason::SlotOutOfRange`];
/// - the slot's player still connected: [`RejectReason::SlotStillConnected`];
/// - before the start (or between matches): the slot, as a new seat;
/// - after the start: a rejoin when the slot had a player, a late join when it never had one
///   and `late_join` (the relay serves snapshots), else [`RejectReason::SessionStarted`].
///
/// # Errors
///
/// The reason to refuse the `Hello`.
pub(crate) fn choose_assigned_seat(
    slots: &[SlotView],
    slot: u8,
    started: bool,
    late_join: bool,
) -> Result<Seat, RejectReason> {
    let Some(view) = slots.get(usize::from(slot)) else {
        return Err(RejectReason::SlotOutOfRange {
            slot,
            players: u8::try_from(slots.len()).unwrap_or(u8::MAX),
        });
    };
    if view.connected {
        return Err(RejectReason::SlotStillConnected { slot });
    }
    if !started {
        return Ok(Seat::New(slot));
    }
    if view.seated || view.claimed {
        Ok(Seat::Rejoin(slot))
    } else if late_join {
        Ok(Seat::Late(slot))
    } else {
        Err(RejectReason::SessionStarted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FREE: SlotView = SlotView {
        seated: false,
        connected: false,
        claimed: false,
    };
    const LIVE: SlotView = SlotView {
        seated: true,
        connected: true,
        claimed: true,
    };
    const SILENT: SlotView = SlotView {
        seated: true,
        connected: false,
        claimed: true,
    };
    const LEFT: SlotView = SlotView {
        seated: false,
        connected: false,
        claimed: true,
    };

    fn tokens() -> (ReconnectTokens, u64) {
        let mut tokens = ReconnectTokens::new(3, 5);
        for slot in 0..3 {
            tokens.issue(slot);
        }
        let token = tokens.current(1).expect("issued");
        (tokens, token)
    }

    #[test]
    fn before_the_start_a_hello_takes_the_first_free_slot() {
        let (tokens, _) = tokens();
        assert_eq!(
            choose_seat(&[LIVE, FREE, FREE], false, false, None, &tokens),
            Ok(Seat::New(1))
        );
        assert_eq!(
            choose_seat(&[LIVE, LIVE, LIVE], false, false, None, &tokens),
            Err(RejectReason::ServerFull)
        );
    }

    #[test]
    fn after_the_start_a_hello_without_a_token_is_refused_even_with_a_free_slot() {
        let (tokens, _) = tokens();
        assert_eq!(
            choose_seat(&[LIVE, FREE, SILENT], true, false, None, &tokens),
            Err(RejectReason::SessionStarted)
        );
    }

    #[test]
    fn a_late_joiner_takes_the_first_slot_no_player_ever_took() {
        let (tokens, _) = tokens();
        assert_eq!(
            choose_seat(&[LIVE, LEFT, FREE], true, true, None, &tokens),
            Ok(Seat::Late(2))
        );
        // A slot whose player left is kept for its reconnect token.
        assert_eq!(
            choose_seat(&[LIVE, LEFT, SILENT], true, true, None, &tokens),
            Err(RejectReason::ServerFull)
        );
        // Before the start it is an ordinary seat.
        assert_eq!(
            choose_seat(&[LIVE, FREE, FREE], false, true, None, &tokens),
            Ok(Seat::New(1))
        );
    }

    #[test]
    fn the_right_token_takes_its_slot_once_the_player_is_gone() {
        let (tokens, token) = tokens();
        let rejoin = Some(ReconnectToken { slot: 1, token });
        for gone in [FREE, SILENT] {
            assert_eq!(
                choose_seat(&[LIVE, gone, LIVE], true, false, rejoin, &tokens),
                Ok(Seat::Rejoin(1))
            );
        }
        // Before the start too, into its own slot rather than the first free one.
        assert_eq!(
            choose_seat(&[FREE, FREE, FREE], false, false, rejoin, &tokens).map(Seat::slot),
            Ok(1)
        );
        assert_eq!(
            choose_seat(&[LIVE, LIVE, LIVE], true, false, rejoin, &tokens),
            Err(RejectReason::SlotStillConnected { slot: 1 })
        );
    }

    #[test]
    fn a_wrong_token_or_slot_is_refused_before_the_slot_is_looked_at() {
        let (tokens, token) = tokens();
        let slots = [LIVE, FREE, LIVE];
        let wrong = Some(ReconnectToken {
            slot: 1,
            token: token.wrapping_add(1),
        });
        assert_eq!(
            choose_seat(&slots, true, false, wrong, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 1 })
        );
        // Slot 0's token does not open slot 1 (nor does slot 1's open slot 0, still connected).
        let other = Some(ReconnectToken {
            slot: 0,
            token: tokens.current(0).expect("issued"),
        });
        assert_eq!(
            choose_seat(&slots, true, false, other, &tokens),
            Err(RejectReason::SlotStillConnected { slot: 0 })
        );
        let swapped = Some(ReconnectToken { slot: 0, token });
        assert_eq!(
            choose_seat(&slots, true, false, swapped, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 0 })
        );
        let missing = Some(ReconnectToken { slot: 9, token });
        assert_eq!(
            choose_seat(&slots, true, false, missing, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 9 })
        );
    }

    #[test]
    fn an_assigned_slot_is_taken_before_the_start_and_taken_again_after_it() {
        assert_eq!(
            choose_assigned_seat(&[LIVE, FREE, FREE], 2, false, false),
            Ok(Seat::New(2))
        );
        assert_eq!(
            choose_assigned_seat(&[LIVE, LEFT, SILENT], 1, true, false),
            Ok(Seat::Rejoin(1))
        );
        assert_eq!(
            choose_assigned_seat(&[LIVE, LEFT, SILENT], 2, true, false),
            Ok(Seat::Rejoin(2))
        );
        assert_eq!(
            choose_assigned_seat(&[LIVE, FREE], 1, true, true),
            Ok(Seat::Late(1))
        );
    }

    #[test]
    fn an_assigned_slot_is_refused_while_its_player_is_connected_or_when_it_does_not_exist() {
        assert_eq!(
            choose_assigned_seat(&[LIVE, FREE], 0, false, false),
            Err(RejectReason::SlotStillConnected { slot: 0 })
        );
        assert_eq!(
            choose_assigned_seat(&[LIVE, FREE], 2, false, false),
            Err(RejectReason::SlotOutOfRange {
                slot: 2,
                players: 2
            })
        );
        assert_eq!(
            choose_assigned_seat(&[LIVE, FREE], 1, true, false),
            Err(RejectReason::SessionStarted)
        );
    }
}
