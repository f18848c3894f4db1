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
}

/// Where a `Hello` is seated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seat {
    /// A free slot, before the session started.
    New(u8),
    /// The slot of the reconnect token, whose player is gone.
    Rejoin(u8),
}

impl Seat {
    /// The slot.
    pub(crate) fn slot(self) -> u8 {
        match self {
            Seat::New(slot) | Seat::Rejoin(slot) => slot,
        }
    }
}

/// The seat of a `Hello` with `reconnect` (its token, if any), given the slots and whether the
/// session `started`:
///
/// - with a token: its slot if the token is the slot's current one
///   ([`RejectReason::BadReconnectToken`] otherwise, also for a slot that does not exist) and
///   the slot's player is not connected ([`RejectReason::SlotStillConnected`] otherwise);
/// - without: the first slot no connection holds while the session has not started;
///   [`RejectReason::SessionStarted`] after, [`RejectReason::ServerFull`] when every slot is
///   held.
///
/// # Errors
///
/// The reason to refuse the `Hello`.
pub(crate) fn choose_seat(
    slots: &[SlotView],
    started: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    const FREE: SlotView = SlotView {
        seated: false,
        connected: false,
    };
    const LIVE: SlotView = SlotView {
        seated: true,
        connected: true,
    };
    const SILENT: SlotView = SlotView {
        seated: true,
        connected: false,
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
            choose_seat(&[LIVE, FREE, FREE], false, None, &tokens),
            Ok(Seat::New(1))
        );
        assert_eq!(
            choose_seat(&[LIVE, LIVE, LIVE], false, None, &tokens),
            Err(RejectReason::ServerFull)
        );
    }

    #[test]
    fn after_the_start_a_hello_without_a_token_is_refused_even_with_a_free_slot() {
        let (tokens, _) = tokens();
        assert_eq!(
            choose_seat(&[LIVE, FREE, SILENT], true, None, &tokens),
            Err(RejectReason::SessionStarted)
        );
    }

    #[test]
    fn the_right_token_takes_its_slot_once_the_player_is_gone() {
        let (tokens, token) = tokens();
        let rejoin = Some(ReconnectToken { slot: 1, token });
        for gone in [FREE, SILENT] {
            assert_eq!(
                choose_seat(&[LIVE, gone, LIVE], true, rejoin, &tokens),
                Ok(Seat::Rejoin(1))
            );
        }
        // Before the start too, into its own slot rather than the first free one.
        assert_eq!(
            choose_seat(&[FREE, FREE, FREE], false, rejoin, &tokens).map(Seat::slot),
            Ok(1)
        );
        assert_eq!(
            choose_seat(&[LIVE, LIVE, LIVE], true, rejoin, &tokens),
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
            choose_seat(&slots, true, wrong, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 1 })
        );
        // Slot 0's token does not open slot 1 (nor does slot 1's open slot 0, still connected).
        let other = Some(ReconnectToken {
            slot: 0,
            token: tokens.current(0).expect("issued"),
        });
        assert_eq!(
            choose_seat(&slots, true, other, &tokens),
            Err(RejectReason::SlotStillConnected { slot: 0 })
        );
        let swapped = Some(ReconnectToken { slot: 0, token });
        assert_eq!(
            choose_seat(&slots, true, swapped, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 0 })
        );
        let missing = Some(ReconnectToken { slot: 9, token });
        assert_eq!(
            choose_seat(&slots, true, missing, &tokens),
            Err(RejectReason::BadReconnectToken { slot: 9 })
        );
    }
}
