//! Whether every participant's copy of every body agrees: [`Converged`] or the first
//! [`Divergence`], body by body in id order.

use std::collections::BTreeMap;

use bevy::prelude::*;
use thiserror::Error;

use crate::components::BodyNetId;
use crate::priority::BodyId;

/// Every copy of every body is within the tolerance ([`OwnershipPeers::convergence`]).
///
/// [`OwnershipPeers::convergence`]: super::OwnershipPeers::convergence
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Converged {
    /// Bodies compared (every [`BodyNetId`] of the participants).
    pub bodies: usize,
    /// Participants compared (the ones alive, paused ones included).
    pub participants: usize,
    /// The body whose copies are farthest apart, and how far, in metres (`None` without
    /// bodies).
    pub widest: Option<(BodyId, f32)>,
}

/// The first body (lowest id) whose copies do not agree.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
pub enum Divergence {
    /// Two participants' copies are farther apart than the tolerance: the two farthest.
    #[error(
        "{body}: participants {} and {} are {spread_m:.4} m apart ({tolerance_m} m allowed): {} vs {}",
        first.0, second.0, first.1, second.1
    )]
    Apart {
        /// The body.
        body: BodyId,
        /// Largest distance between two copies, m.
        spread_m: f32,
        /// The tolerance, m.
        tolerance_m: f32,
        /// One participant (index) and its copy's position.
        first: (usize, Vec3),
        /// The other participant and its copy's position.
        second: (usize, Vec3),
    },
    /// A participant has no copy of a body the others have.
    #[error("{body}: participant {participant} has no copy of it")]
    Missing {
        /// The body.
        body: BodyId,
        /// The participant (index) without it.
        participant: usize,
    },
}

/// Every body's position in `world`, by id (the first entity of an id if several have it):
/// the copies one App holds, for [`compare_copies`].
pub fn body_positions(world: &mut World) -> BTreeMap<BodyId, Vec3> {
    let mut query = world.query::<(&BodyNetId, &Transform)>();
    let mut found = BTreeMap::new();
    for (id, transform) in query.iter(world) {
        found.entry(id.0).or_insert(transform.translation);
    }
    found
}

/// Compares the copies of every body of `copies` (participant index, its positions), body by
/// body in id order: the first body missing somewhere or spread wider than `tolerance_m` is the
/// [`Divergence`]. What [`OwnershipPeers::convergence`](super::OwnershipPeers::convergence)
/// checks, for a harness holding its participants itself.
///
/// # Errors
/// The first [`Divergence`].
pub fn compare_copies(
    copies: &[(usize, BTreeMap<BodyId, Vec3>)],
    tolerance_m: f32,
) -> Result<Converged, Divergence> {
    let mut all: BTreeMap<BodyId, Vec<(usize, Vec3)>> = BTreeMap::new();
    for (index, bodies) in copies {
        for (body, at) in bodies {
            all.entry(*body).or_default().push((*index, *at));
        }
    }
    let mut widest: Option<(BodyId, f32)> = None;
    for (body, at) in &all {
        if let Some((participant, _)) = copies.iter().find(|(_, b)| !b.contains_key(body)) {
            return Err(Divergence::Missing {
                body: *body,
                participant: *participant,
            });
        }
        let (spread_m, first, second) = farthest(at);
        if spread_m > tolerance_m {
            return Err(Divergence::Apart {
                body: *body,
                spread_m,
                tolerance_m,
                first,
                second,
            });
        }
        if widest.is_none_or(|(_, w)| spread_m > w) {
            widest = Some((*body, spread_m));
        }
    }
    Ok(Converged {
        bodies: all.len(),
        participants: copies.len(),
        widest,
    })
}

/// The two copies farthest apart, and their distance.
fn farthest(at: &[(usize, Vec3)]) -> (f32, (usize, Vec3), (usize, Vec3)) {
    let mut best = (0.0, at[0], at[0]);
    for (i, a) in at.iter().enumerate() {
        for b in &at[i + 1..] {
            let d = a.1.distance(b.1);
            if d > best.0 {
                best = (d, *a, *b);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(index: usize, bodies: &[(u64, f32)]) -> (usize, BTreeMap<BodyId, Vec3>) {
        let map = bodies
            .iter()
            .map(|(id, x)| (BodyId(*id), Vec3::new(*x, 0.0, 0.0)))
            .collect();
        (index, map)
    }

    #[test]
    fn the_first_body_apart_is_named_with_its_two_farthest_copies() {
        let copies = [
            copy(0, &[(1, 0.0), (2, 5.0), (3, 1.0)]),
            copy(1, &[(1, 0.001), (2, 5.5), (3, 9.0)]),
            copy(2, &[(1, 0.0), (2, 5.2), (3, 1.0)]),
        ];
        let d = compare_copies(&copies, 0.01).unwrap_err();
        assert_eq!(
            d,
            Divergence::Apart {
                body: BodyId(2),
                spread_m: 0.5,
                tolerance_m: 0.01,
                first: (0, Vec3::new(5.0, 0.0, 0.0)),
                second: (1, Vec3::new(5.5, 0.0, 0.0)),
            }
        );
        assert!(
            d.to_string()
                .starts_with("body 2: participants 0 and 1 are 0.5000 m apart")
        );
        let ok = compare_copies(&copies, 10.0).unwrap();
        assert_eq!(ok.bodies, 3);
        assert_eq!(ok.widest, Some((BodyId(3), 8.0)));
    }

    #[test]
    fn a_missing_copy_is_a_divergence() {
        let copies = [copy(0, &[(1, 0.0), (2, 0.0)]), copy(1, &[(2, 0.0)])];
        assert_eq!(
            compare_copies(&copies, 1.0),
            Err(Divergence::Missing {
                body: BodyId(1),
                participant: 1
            })
        );
    }
}
