//! Where inputs land and how they are checked: no false desyncs, inputs on time or counted,
//! a client's inputs only in its own slot.

use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::{ClientMessage, MatchId, SessionClientMessage};

use super::harness::{Peers, PeersExt, peers};
use crate::common::{TestGame, scripted_input};

fn game() -> TestGame {
    TestGame {
        boxes: 20,
        ..TestGame::default()
    }
}

/// Two clients over `link`. Every client samples `scripted_input(slot, tick)` for each tick it
/// polls (exact even when an update polls several ticks), so the test knows what each client
/// sent for every tick.
fn two(link: LinkConditionerConfig) -> Peers {
    peers(game(), link).build().expect("peers")
}

/// Client `client`'s confirmed input of `slot` at `tick`, if still buffered.
fn confirmed(h: &Peers, client: usize, slot: u8, tick: i32) -> Option<PackedInput> {
    let app = h.client(client).expect("running");
    let session = app.world().resource::<DeterministicSession<PackedInput>>();
    session.buffer().confirmed(slot, tick).copied()
}

#[test]
fn mispredicted_first_inputs_cause_rollbacks_but_no_false_desync() {
    // 60 ms each way: remote inputs arrive ~4 ticks late, so the first ones (which move the
    // balls) are predicted wrong.
    let mut h = two(LinkConditionerConfig::PERFECT.with_latency(60, 10));
    h.verify(200, 600);
    let relay = h.relay_stats();
    assert_eq!(relay.desyncs, 0, "{relay:?}");
    for c in 0..2 {
        let s = h.stats_of(c);
        let net = s.network.clone().expect("networked");
        assert_eq!(net.desyncs + net.others_desynced, 0, "{net:?}");
        assert!(s.rollbacks > 0 && s.mispredicted_inputs > 0, "{s:?}");
        // Checksums every tick (checksum_interval 1), all sent: ≥ 200 compared by the relay.
        assert!(
            s.checksum_history.len() >= 200,
            "{}",
            s.checksum_history.len()
        );
    }
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= 200, "{agreement:?}");
}

#[test]
fn zero_latency_inputs_arrive_before_confirmation_or_are_counted() {
    let mut h = two(LinkConditionerConfig::PERFECT);
    // For every verified tick and slot: the confirmed input is what that client sampled, or it
    // was replaced (counted). The buffer keeps recent ticks; check them as they get verified.
    let mut checked_through = 0;
    let mut stale = [0u64; 2];
    let mut checked = 0u64;
    for _ in 0..1_200 {
        h.step();
        let verified = (0..2)
            .map(|c| h.stats_of(c).verified_tick)
            .min()
            .unwrap_or(0);
        for tick in checked_through + 1..=verified {
            for slot in 0..2u8 {
                let confirmed = confirmed(&h, 0, slot, tick)
                    .unwrap_or_else(|| panic!("tick {tick} slot {slot} no longer buffered"));
                checked += 1;
                if confirmed != scripted_input(slot, tick) {
                    stale[usize::from(slot)] += 1;
                }
            }
        }
        checked_through = checked_through.max(verified);
        if verified >= 1_000 {
            break;
        }
    }
    assert!(checked_through >= 1_000, "{checked_through}");
    assert_eq!(checked, 2 * checked_through as u64);
    let relay = h.relay_stats();
    eprintln!("zero latency: stale {stale:?}, relay {relay:?}");
    for slot in 0..2 {
        let net = h.net_of(slot);
        // Never silently stale: each differing input was replaced at the server and the
        // owning client learnt it was late.
        assert!(
            stale[slot] <= relay.replaced_inputs[slot],
            "{stale:?} {relay:?}"
        );
        assert!(stale[slot] <= net.late_inputs, "{stale:?} {net:?}");
        // With a perfect link and the clock lead, none is even late.
        assert_eq!(relay.replaced_inputs[slot], 0, "{relay:?}");
        assert_eq!(net.late_inputs, 0, "{net:?}");
    }
}

#[test]
fn a_clients_inputs_land_in_its_own_slot_only() {
    let mut h = two(LinkConditionerConfig::PERFECT.with_latency(20, 0));
    h.verify(100, 400);
    // Client 0 sends an input no script produces for 4 ticks it has not sampled yet (the first
    // copy the relay gets of a tick is the one it keeps; its own copies arrive later). Only a
    // little ahead: far-future inputs would inflate its reported lead and its clock would step
    // back.
    let mut marker = PackedInput::default();
    for button in 0..8 {
        marker.set_pressed(button, true).expect("button");
    }
    marker.set_axis(0, 0.5).expect("axis");
    marker.set_axis(1, -0.5).expect("axis");
    let net = h.net_of(0);
    let first_tick = h.stats_of(0).local_tick + net.input_delay_ticks as i32 + 2;
    let message = ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::Inputs {
            first_tick,
            inputs: vec![simsync_net::encode(&marker).expect("encodes"); 4],
            ack_tick: 0,
        },
    );
    h.client_mut(0)
        .expect("running")
        .world_mut()
        .resource_mut::<RenetClient>()
        .send_msg(&message)
        .expect("sent");
    h.verify(first_tick + 4, 200);
    for c in 0..2 {
        for tick in first_tick..first_tick + 4 {
            let slot0 = confirmed(&h, c, 0, tick).expect("buffered");
            let slot1 = confirmed(&h, c, 1, tick).expect("buffered");
            assert_eq!(slot0, marker, "client {c} tick {tick}");
            assert_eq!(slot1, scripted_input(1, tick), "client {c} tick {tick}");
        }
        // Around them, both slots carry their own client's inputs.
        for tick in [first_tick - 1, first_tick + 4] {
            for slot in 0..2u8 {
                let input = confirmed(&h, c, slot, tick).expect("buffered");
                assert_eq!(
                    input,
                    scripted_input(slot, tick),
                    "tick {tick} slot {slot} first {first_tick} relay {:?}",
                    h.relay_stats()
                );
            }
        }
    }
    assert_eq!(h.relay_stats().desyncs, 0);
    h.assert_all_agree();
}
