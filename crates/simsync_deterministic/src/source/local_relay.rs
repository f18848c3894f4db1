//! [`LocalRelay`]: the relay server of single-process sessions, with deterministic latency and jitter.

use std::collections::BTreeMap;

use simsync_net::SplitMix64;

use crate::input::{InputBuffer, InputError, SimInput};
use crate::tick::{PlayerIndex, Tick};

/// Configuration of a [`LocalRelay`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalRelayConfig {
    /// Number of players (`>= 1`); valid player indices are `0..players`.
    pub players: u8,
    /// Per-player one-way latency in ticks (exactly `players` entries): an input submitted at tick `s`
    /// reaches the relay at `s + latency_ticks[player]` plus jitter.
    pub latency_ticks: Vec<u32>,
    /// Maximum extra delay in ticks; each submission draws a jitter uniformly-ish from `0..=jitter_ticks`.
    pub jitter_ticks: u32,
    /// Seed of the jitter generator: the same config and the same submissions give the same arrivals.
    pub seed: u64,
}

/// One input handed out by [`LocalRelay::drain_arrived`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelayDelivery<I> {
    /// The tick at which the input reached the relay.
    pub arrival: Tick,
    /// The player whose input it is.
    pub player: PlayerIndex,
    /// The tick the input is for.
    pub tick: Tick,
    /// The input.
    pub input: I,
}

/// An input that [`LocalRelay::deliver`] handed to the buffer and the buffer rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayRejection {
    /// The player whose input it was.
    pub player: PlayerIndex,
    /// The tick the input was for.
    pub tick: Tick,
    /// Why the buffer rejected it.
    pub error: InputError,
}

/// Ordering key of a pending input: arrival, then player, then tick, then submission order.
type PendingKey = (Tick, PlayerIndex, Tick, u64);

/// A stand-in for the relay server in single-process sessions (local multiplayer, tests, benches).
///
/// Inputs are [`submit`](Self::submit)ted with the tick at which they were sampled; each reaches the
/// relay `latency_ticks[player]` ticks later plus a pseudo-random jitter in `0..=jitter_ticks` drawn
/// from a SplitMix64 generator seeded with `seed` (one draw per accepted submission). Arrivals of one
/// player never go backwards: an input arrives no earlier than the previous input of the same player.
/// [`deliver`](Self::deliver) confirms the arrived inputs into an [`InputBuffer`] in the order
/// (arrival, player, tick, submission). Everything is deterministic: the same config and the same
/// sequence of calls give the same deliveries on every machine.
///
/// Pending inputs are held until delivered; memory grows with the number of undelivered submissions.
#[derive(Debug, Clone)]
pub struct LocalRelay<I: SimInput> {
    config: LocalRelayConfig,
    rng: SplitMix64,
    last_arrival: Vec<Option<Tick>>,
    pending: BTreeMap<PendingKey, I>,
    next_seq: u64,
    rejected: u64,
    last_rejection: Option<RelayRejection>,
}

impl<I: SimInput> LocalRelay<I> {
    /// Creates a relay with nothing pending.
    ///
    /// # Errors
    /// [`InputError::NoPlayers`] when `config.players == 0`; [`InputError::LatencyCountMismatch`] when
    /// `config.latency_ticks.len() != config.players`.
    pub fn new(config: LocalRelayConfig) -> Result<Self, InputError> {
        if config.players == 0 {
            return Err(InputError::NoPlayers);
        }
        if config.latency_ticks.len() != usize::from(config.players) {
            return Err(InputError::LatencyCountMismatch {
                players: config.players,
                latencies: config.latency_ticks.len(),
            });
        }
        Ok(Self {
            rng: SplitMix64::new(config.seed),
            last_arrival: vec![None; usize::from(config.players)],
            pending: BTreeMap::new(),
            next_seq: 0,
            rejected: 0,
            last_rejection: None,
            config,
        })
    }

    /// The configuration given to [`new`](Self::new).
    pub fn config(&self) -> &LocalRelayConfig {
        &self.config
    }

    /// The number of submitted inputs not delivered yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Submits `player`'s `input` for tick `for_tick`, sampled at tick `tick_sampled_at`, and returns the
    /// tick at which it reaches the relay: `tick_sampled_at + latency_ticks[player] + jitter`, raised to
    /// the player's previous arrival if it would be earlier.
    ///
    /// # Errors
    /// [`InputError::UnknownPlayer`]; [`InputError::TickOutOfRange`] when `for_tick < 1` (tick `0` is the
    /// setup tick) or when the arrival tick would exceed `Tick::MAX` (then `tick` is `for_tick` and the
    /// range is `1..=Tick::MAX`). A rejected submission draws no jitter and changes nothing.
    pub fn submit(
        &mut self,
        player: PlayerIndex,
        tick_sampled_at: Tick,
        for_tick: Tick,
        input: I,
    ) -> Result<Tick, InputError> {
        let Some(&latency) = self.config.latency_ticks.get(usize::from(player)) else {
            return Err(InputError::UnknownPlayer {
                player,
                players: self.config.players,
            });
        };
        let out_of_range = InputError::TickOutOfRange {
            tick: for_tick,
            first: 1,
            last: Tick::MAX,
        };
        if for_tick < 1 {
            return Err(out_of_range);
        }
        // Draw on a copy so a rejected submission leaves the generator untouched.
        let mut rng = self.rng;
        let jitter = rng.next_u64() % (u64::from(self.config.jitter_ticks) + 1);
        let earliest = i64::from(tick_sampled_at) + i64::from(latency) + jitter as i64;
        let mut arrival = Tick::try_from(earliest).map_err(|_| out_of_range)?;
        let last = &mut self.last_arrival[usize::from(player)];
        if let Some(previous) = *last {
            arrival = arrival.max(previous);
        }
        *last = Some(arrival);
        self.rng = rng;
        self.pending
            .insert((arrival, player, for_tick, self.next_seq), input);
        self.next_seq += 1;
        Ok(arrival)
    }

    /// Removes every pending input with `arrival <= now` and appends it to `out`, in the order
    /// (arrival, player, tick, submission order). Returns how many were appended.
    pub fn drain_arrived(&mut self, now: Tick, out: &mut Vec<RelayDelivery<I>>) -> usize {
        let mut count = 0;
        while let Some(entry) = self.pending.first_entry() {
            let (arrival, player, tick, _) = *entry.key();
            if arrival > now {
                break;
            }
            out.push(RelayDelivery {
                arrival,
                player,
                tick,
                input: entry.remove(),
            });
            count += 1;
        }
        count
    }

    /// Confirms every pending input with `arrival <= now` into `buffer`, in the order (arrival, player,
    /// tick, submission order), and returns how many the buffer accepted (new or duplicate).
    ///
    /// An input for a tick past the buffer's [`storable_ticks`](InputBuffer::storable_ticks) stays pending
    /// (with its arrival and place in the order) until a later call finds it storable, so a slow verified
    /// world never loses inputs. Inputs the buffer rejects otherwise (conflicting, too old, unknown
    /// player) are dropped and counted in [`rejected`](Self::rejected); the latest is kept in
    /// [`last_rejection`](Self::last_rejection).
    pub fn deliver(&mut self, now: Tick, buffer: &mut InputBuffer<I>) -> usize {
        let mut accepted = 0;
        let mut deferred = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            let (arrival, player, tick, _) = *entry.key();
            if arrival > now {
                break;
            }
            let (key, input) = entry.remove_entry();
            if tick > *buffer.storable_ticks().end() {
                deferred.push((key, input));
                continue;
            }
            match buffer.confirm(player, tick, input) {
                Ok(_) => accepted += 1,
                Err(error) => {
                    self.rejected += 1;
                    self.last_rejection = Some(RelayRejection {
                        player,
                        tick,
                        error,
                    });
                }
            }
        }
        self.pending.extend(deferred);
        accepted
    }

    /// How many delivered inputs the buffer rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// The most recent input the buffer rejected in [`deliver`](Self::deliver), if any.
    pub fn last_rejection(&self) -> Option<&RelayRejection> {
        self.last_rejection.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(latency: Vec<u32>, jitter: u32, seed: u64) -> LocalRelayConfig {
        LocalRelayConfig {
            players: latency.len() as u8,
            latency_ticks: latency,
            jitter_ticks: jitter,
            seed,
        }
    }

    #[test]
    fn config_errors() {
        assert_eq!(
            LocalRelay::<u32>::new(config(vec![], 0, 1)).unwrap_err(),
            InputError::NoPlayers
        );
        let mut bad = config(vec![1, 2], 0, 1);
        bad.latency_ticks.pop();
        assert_eq!(
            LocalRelay::<u32>::new(bad).unwrap_err(),
            InputError::LatencyCountMismatch {
                players: 2,
                latencies: 1
            }
        );
        let mut relay = LocalRelay::<u32>::new(config(vec![1], 0, 1)).unwrap();
        assert_eq!(
            relay.submit(1, 0, 1, 5),
            Err(InputError::UnknownPlayer {
                player: 1,
                players: 1
            })
        );
        assert_eq!(
            relay.submit(0, 0, 0, 5),
            Err(InputError::TickOutOfRange {
                tick: 0,
                first: 1,
                last: Tick::MAX
            })
        );
        assert_eq!(
            relay.submit(0, Tick::MAX, 3, 5),
            Err(InputError::TickOutOfRange {
                tick: 3,
                first: 1,
                last: Tick::MAX
            })
        );
        assert_eq!(relay.pending(), 0);
    }

    #[test]
    fn delivers_after_latency_exactly() {
        let mut relay = LocalRelay::new(config(vec![6, 2], 0, 99)).unwrap();
        let mut buffer = InputBuffer::<u32>::new(2, 64).unwrap();
        assert_eq!(relay.submit(0, 10, 12, 7), Ok(16));
        assert_eq!(relay.submit(1, 10, 12, 8), Ok(12));
        assert_eq!(relay.deliver(11, &mut buffer), 0);
        assert_eq!(relay.deliver(12, &mut buffer), 1);
        assert_eq!(buffer.confirmed(1, 12), Some(&8));
        assert_eq!(relay.deliver(15, &mut buffer), 0);
        assert_eq!(buffer.confirmed(0, 12), None);
        assert_eq!(relay.deliver(16, &mut buffer), 1);
        assert_eq!(buffer.confirmed(0, 12), Some(&7));
        assert_eq!(relay.pending(), 0);
        assert_eq!(relay.deliver(100, &mut buffer), 0);
    }

    #[test]
    fn delivery_order_is_arrival_then_player_then_tick() {
        let mut relay = LocalRelay::new(config(vec![3, 1, 0], 0, 5)).unwrap();
        relay.submit(2, 5, 9, 'a' as u32).unwrap(); // arrives 5
        relay.submit(0, 1, 4, 'b' as u32).unwrap(); // arrives 4
        relay.submit(1, 4, 8, 'c' as u32).unwrap(); // arrives 5
        relay.submit(1, 4, 6, 'd' as u32).unwrap(); // arrives 5
        relay.submit(0, 2, 5, 'e' as u32).unwrap(); // arrives 5
        let mut out = Vec::new();
        assert_eq!(relay.drain_arrived(5, &mut out), 5);
        let order: Vec<(Tick, PlayerIndex, Tick)> =
            out.iter().map(|d| (d.arrival, d.player, d.tick)).collect();
        assert_eq!(
            order,
            vec![(4, 0, 4), (5, 0, 5), (5, 1, 6), (5, 1, 8), (5, 2, 9)]
        );
    }

    #[test]
    fn rejected_inputs_are_counted_and_first_confirmation_wins() {
        let mut relay = LocalRelay::new(config(vec![0], 0, 5)).unwrap();
        let mut buffer = InputBuffer::<u32>::new(1, 8).unwrap();
        relay.submit(0, 1, 1, 10).unwrap();
        relay.submit(0, 1, 1, 11).unwrap(); // same arrival, later submission
        relay.submit(0, 1, 1, 10).unwrap(); // duplicate: accepted
        assert_eq!(relay.deliver(1, &mut buffer), 2);
        assert_eq!(buffer.confirmed(0, 1), Some(&10));
        assert_eq!(relay.rejected(), 1);
        assert_eq!(
            relay.last_rejection(),
            Some(&RelayRejection {
                player: 0,
                tick: 1,
                error: InputError::ConflictingConfirmation { player: 0, tick: 1 }
            })
        );
        assert_eq!(buffer.discard_through(1), 1);
        relay.submit(0, 2, 1, 10).unwrap(); // already discarded
        assert_eq!(relay.deliver(2, &mut buffer), 0);
        assert_eq!(relay.rejected(), 2);
        assert_eq!(
            relay.last_rejection().map(|r| &r.error),
            Some(&InputError::TooOld {
                tick: 1,
                discarded_through: 1
            })
        );
    }

    #[test]
    fn inputs_past_the_buffer_window_wait_instead_of_being_lost() {
        let mut relay = LocalRelay::new(config(vec![0], 0, 5)).unwrap();
        let mut buffer = InputBuffer::<u32>::new(1, 4).unwrap();
        for t in 1..=6 {
            relay.submit(0, 1, t, 100 + t as u32).unwrap();
        }
        assert_eq!(
            relay.deliver(1, &mut buffer),
            4,
            "ticks 1..=4 fit the window"
        );
        assert_eq!(relay.pending(), 2);
        assert_eq!(relay.rejected(), 0);
        assert_eq!(buffer.discard_through(2), 2);
        assert_eq!(relay.deliver(1, &mut buffer), 2);
        assert_eq!(relay.pending(), 0);
        assert_eq!(buffer.max_verifiable_tick(), 6);
        assert_eq!(buffer.confirmed(0, 6), Some(&106));
    }

    fn arrivals(seed: u64) -> Vec<(PlayerIndex, Tick)> {
        let mut relay = LocalRelay::<u32>::new(config(vec![3, 5], 4, seed)).unwrap();
        let mut out = Vec::new();
        for t in 1..=200 {
            for p in 0..2 {
                out.push((p, relay.submit(p, t, t + 2, t as u32).unwrap()));
            }
        }
        out
    }

    #[test]
    fn jitter_is_deterministic_bounded_and_monotonic() {
        let a = arrivals(42);
        assert_eq!(a, arrivals(42), "same seed, same arrivals");
        assert_ne!(a, arrivals(43), "another seed, other arrivals");
        let latency = [3, 5];
        let mut previous = [Tick::MIN; 2];
        let mut extra_seen = [false; 5];
        for (i, &(p, arrival)) in a.iter().enumerate() {
            let sampled = (i / 2 + 1) as Tick;
            let p = usize::from(p);
            let base = sampled + latency[p];
            assert!(arrival >= base, "never earlier than the latency");
            assert!(
                arrival <= base + 4,
                "jitter at most 4 (clamping only raises to a value <= this)"
            );
            assert!(arrival >= previous[p], "monotonic per player");
            previous[p] = arrival;
            extra_seen[(arrival - base) as usize] = true;
        }
        assert_eq!(extra_seen, [true; 5], "every jitter value 0..=4 occurs");
    }

    #[test]
    fn monotonic_clamp_raises_late_submissions() {
        // Player 0 submits an input sampled earlier after one sampled later: it cannot overtake.
        let mut relay = LocalRelay::<u32>::new(config(vec![2], 0, 1)).unwrap();
        assert_eq!(relay.submit(0, 10, 11, 1), Ok(12));
        assert_eq!(relay.submit(0, 5, 6, 2), Ok(12));
        let mut buffer = InputBuffer::<u32>::new(1, 32).unwrap();
        assert_eq!(relay.deliver(11, &mut buffer), 0);
        assert_eq!(relay.deliver(12, &mut buffer), 2);
    }
}
