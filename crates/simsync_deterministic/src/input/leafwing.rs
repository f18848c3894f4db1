//! The leafwing-input-manager adapter: [`PackedInput`] and [`InputEncoder`].

use core::fmt;

use bevy::reflect::Reflect;
use leafwing_input_manager::Actionlike;
use leafwing_input_manager::InputControlKind;
use leafwing_input_manager::action_state::ActionState;
use serde::{Deserialize, Serialize};

use super::InputError;

/// A compact, deterministic per-tick input: 16 buttons as bits and 2 axes quantized to `i8`.
///
/// Usable directly as a session's input type (it is a [`SimInput`](super::SimInput)). Axis values are
/// stored as `round(v * 127)` for `v` in `[-1, 1]`, so equal stored values mean bit-identical simulation
/// inputs on every peer. The `Default` value has no button pressed and both axes at `0`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, Reflect)]
pub struct PackedInput {
    /// Button bits: bit `b` (`0..16`) set means button `b` is pressed.
    pub buttons: u16,
    /// Quantized axes: `value / 127` in `[-1, 1]` (`i8::MIN` reads as `-1` too).
    pub axes: [i8; 2],
}

impl PackedInput {
    /// The number of button bits (`16`); valid bit indices are `0..BUTTONS`.
    pub const BUTTONS: u8 = 16;
    /// The number of axis slots (`2`); valid slot indices are `0..AXES`.
    pub const AXES: usize = 2;

    /// Whether button `bit` is pressed. `false` for `bit >= 16`.
    pub fn pressed(&self, bit: u8) -> bool {
        bit < Self::BUTTONS && self.buttons & (1 << bit) != 0
    }

    /// Presses (`true`) or releases (`false`) button `bit`.
    ///
    /// # Errors
    /// [`InputError::BitOutOfRange`] for `bit >= 16`; the input is unchanged.
    pub fn set_pressed(&mut self, bit: u8, pressed: bool) -> Result<(), InputError> {
        if bit >= Self::BUTTONS {
            return Err(InputError::BitOutOfRange {
                bit,
                bits: Self::BUTTONS,
            });
        }
        if pressed {
            self.buttons |= 1 << bit;
        } else {
            self.buttons &= !(1 << bit);
        }
        Ok(())
    }

    /// Whether button `bit` is pressed now but was not in `previous` (the input of the previous tick).
    /// `false` for `bit >= 16`.
    pub fn just_pressed(&self, previous: &Self, bit: u8) -> bool {
        self.pressed(bit) && !previous.pressed(bit)
    }

    /// Whether button `bit` was pressed in `previous` (the input of the previous tick) but is not now.
    /// `false` for `bit >= 16`.
    pub fn just_released(&self, previous: &Self, bit: u8) -> bool {
        !self.pressed(bit) && previous.pressed(bit)
    }

    /// Axis `slot` dequantized to `[-1, 1]`: `value / 127`, with `i8::MIN` read as `-1`.
    /// `0.0` for `slot >= 2`.
    pub fn axis(&self, slot: usize) -> f32 {
        match self.axes.get(slot) {
            Some(&i8::MIN) => -1.0,
            Some(&q) => f32::from(q) / 127.0,
            None => 0.0,
        }
    }

    /// Quantizes `value` into axis `slot`: clamped to `[-1, 1]` (`NaN` becomes `0`), then
    /// `round(value * 127)` with halves rounded away from zero (so `0.5` → `64`, `-0.5` → `-64`).
    ///
    /// # Errors
    /// [`InputError::AxisSlotOutOfRange`] for `slot >= 2`; the input is unchanged.
    pub fn set_axis(&mut self, slot: usize, value: f32) -> Result<(), InputError> {
        let axis = self
            .axes
            .get_mut(slot)
            .ok_or(InputError::AxisSlotOutOfRange {
                slot,
                slots: Self::AXES,
            })?;
        *axis = quantize(value);
        Ok(())
    }
}

/// `round(clamp(v, -1, 1) * 127)`, `NaN` → `0`.
fn quantize(value: f32) -> i8 {
    if value.is_nan() {
        return 0;
    }
    // In [-127, 127] after clamping, so the cast is exact.
    (value.clamp(-1.0, 1.0) * 127.0).round() as i8
}

fn kind_name(kind: InputControlKind) -> &'static str {
    match kind {
        InputControlKind::Button => "Button",
        InputControlKind::Axis => "Axis",
        InputControlKind::DualAxis => "DualAxis",
        InputControlKind::TripleAxis => "TripleAxis",
    }
}

fn check_kind<A: Actionlike>(action: &A, expected: InputControlKind) -> Result<(), InputError> {
    let found = action.input_control_kind();
    if found == expected {
        Ok(())
    } else {
        Err(InputError::WrongActionKind {
            action: format!("{action:?}"),
            expected: kind_name(expected),
            found: kind_name(found),
        })
    }
}

/// Encodes a leafwing-input-manager [`ActionState<A>`] into a [`PackedInput`].
///
/// Built by chaining fallible mapping calls; every mistake (bit or slot out of range, bit or slot mapped
/// twice, action of the wrong `InputControlKind`) is an [`InputError`] at build time, so
/// [`encode`](Self::encode) never fails or panics:
///
/// ```ignore
/// let encoder = InputEncoder::new()
///     .button(Action::Jump, 0)?
///     .axis(Action::Throttle, 0)?;
/// let input: PackedInput = encoder.encode(&action_state);
/// ```
///
/// Button actions set their bit when [`ActionState::pressed`]; axis actions store
/// [`ActionState::clamped_value`]; dual-axis actions store the two components of
/// [`ActionState::axis_pair`] (each clamped). Disabled actions encode as released / `0`. Unmapped bits and
/// slots stay `0`.
#[derive(Clone)]
pub struct InputEncoder<A: Actionlike> {
    buttons: Vec<(A, u8)>,
    axes: Vec<(A, usize)>,
    dual_axes: Vec<(A, usize, usize)>,
    used_bits: u16,
    used_slots: [bool; PackedInput::AXES],
}

impl<A: Actionlike> fmt::Debug for InputEncoder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputEncoder")
            .field("buttons", &self.buttons)
            .field("axes", &self.axes)
            .field("dual_axes", &self.dual_axes)
            .finish()
    }
}

impl<A: Actionlike> Default for InputEncoder<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: Actionlike> InputEncoder<A> {
    /// An encoder with no mappings (encodes every state as `PackedInput::default()`).
    pub fn new() -> Self {
        Self {
            buttons: Vec::new(),
            axes: Vec::new(),
            dual_axes: Vec::new(),
            used_bits: 0,
            used_slots: [false; PackedInput::AXES],
        }
    }

    fn claim_slot(&self, slot: usize) -> Result<(), InputError> {
        match self.used_slots.get(slot) {
            None => Err(InputError::AxisSlotOutOfRange {
                slot,
                slots: PackedInput::AXES,
            }),
            Some(true) => Err(InputError::AxisSlotAlreadyMapped { slot }),
            Some(false) => Ok(()),
        }
    }

    /// Maps the button action `action` to button `bit` (`0..16`).
    ///
    /// # Errors
    /// [`InputError::BitOutOfRange`], [`InputError::BitAlreadyMapped`], or
    /// [`InputError::WrongActionKind`] when `action` is not a `Button` action.
    pub fn button(mut self, action: A, bit: u8) -> Result<Self, InputError> {
        if bit >= PackedInput::BUTTONS {
            return Err(InputError::BitOutOfRange {
                bit,
                bits: PackedInput::BUTTONS,
            });
        }
        if self.used_bits & (1 << bit) != 0 {
            return Err(InputError::BitAlreadyMapped { bit });
        }
        check_kind(&action, InputControlKind::Button)?;
        self.used_bits |= 1 << bit;
        self.buttons.push((action, bit));
        Ok(self)
    }

    /// Maps the axis action `action` to axis `slot` (`0..2`), storing its clamped value.
    ///
    /// # Errors
    /// [`InputError::AxisSlotOutOfRange`], [`InputError::AxisSlotAlreadyMapped`], or
    /// [`InputError::WrongActionKind`] when `action` is not an `Axis` action.
    pub fn axis(mut self, action: A, slot: usize) -> Result<Self, InputError> {
        self.claim_slot(slot)?;
        check_kind(&action, InputControlKind::Axis)?;
        self.used_slots[slot] = true;
        self.axes.push((action, slot));
        Ok(self)
    }

    /// Maps the dual-axis action `action` to axis slots `slot_x` and `slot_y` (`0..2`, distinct).
    ///
    /// # Errors
    /// [`InputError::AxisSlotOutOfRange`], [`InputError::AxisSlotAlreadyMapped`] (also when
    /// `slot_x == slot_y`), or [`InputError::WrongActionKind`] when `action` is not a `DualAxis` action.
    pub fn dual_axis(
        mut self,
        action: A,
        slot_x: usize,
        slot_y: usize,
    ) -> Result<Self, InputError> {
        self.claim_slot(slot_x)?;
        self.claim_slot(slot_y)?;
        if slot_x == slot_y {
            return Err(InputError::AxisSlotAlreadyMapped { slot: slot_y });
        }
        check_kind(&action, InputControlKind::DualAxis)?;
        self.used_slots[slot_x] = true;
        self.used_slots[slot_y] = true;
        self.dual_axes.push((action, slot_x, slot_y));
        Ok(self)
    }

    /// Encodes the current state of the mapped actions.
    pub fn encode(&self, state: &ActionState<A>) -> PackedInput {
        let mut out = PackedInput::default();
        for (action, bit) in &self.buttons {
            if state.pressed(action) {
                out.buttons |= 1 << bit;
            }
        }
        // Slots were validated when mapped, so indexing cannot fail.
        for (action, slot) in &self.axes {
            out.axes[*slot] = quantize(state.clamped_value(action));
        }
        for (action, slot_x, slot_y) in &self.dual_axes {
            let pair = state.axis_pair(action);
            out.axes[*slot_x] = quantize(pair.x);
            out.axes[*slot_y] = quantize(pair.y);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::math::Vec2;

    #[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
    enum Action {
        Jump,
        Fire,
        #[actionlike(Axis)]
        Throttle,
        #[actionlike(DualAxis)]
        Move,
    }

    #[test]
    fn quantization_round_trip() {
        let mut p = PackedInput::default();
        p.set_axis(0, 1.0).unwrap();
        assert_eq!(p.axes[0], 127);
        assert_eq!(p.axis(0), 1.0);
        p.set_axis(0, 0.5).unwrap();
        assert_eq!(p.axes[0], 64);
        p.set_axis(1, -0.5).unwrap();
        assert_eq!(p.axes[1], -64);
        assert_eq!(p.axis(1), -64.0 / 127.0);
        p.set_axis(0, f32::NAN).unwrap();
        assert_eq!(p.axes[0], 0);
        assert_eq!(p.axis(0), 0.0);
        p.set_axis(0, 2.0).unwrap();
        assert_eq!(p.axes[0], 127);
        assert_eq!(p.axis(0), 1.0);
        p.set_axis(0, f32::NEG_INFINITY).unwrap();
        assert_eq!(p.axes[0], -127);
        assert_eq!(p.axis(0), -1.0);
        p.axes[1] = i8::MIN;
        assert_eq!(p.axis(1), -1.0);
        assert_eq!(p.axis(2), 0.0);
        assert_eq!(
            p.set_axis(2, 0.3),
            Err(InputError::AxisSlotOutOfRange { slot: 2, slots: 2 })
        );
        // Every stored value survives dequantize → quantize.
        for q in -127i8..=127 {
            let mut a = PackedInput::default();
            a.axes[0] = q;
            let v = a.axis(0);
            a.set_axis(0, v).unwrap();
            assert_eq!(a.axes[0], q);
        }
    }

    #[test]
    fn buttons_and_edges() {
        let mut prev = PackedInput::default();
        let mut now = PackedInput::default();
        now.set_pressed(3, true).unwrap();
        now.set_pressed(15, true).unwrap();
        assert_eq!(now.buttons, 0b1000_0000_0000_1000);
        assert!(now.pressed(3) && now.pressed(15) && !now.pressed(4));
        assert!(!now.pressed(16) && !now.pressed(255));
        assert_eq!(
            now.set_pressed(16, true),
            Err(InputError::BitOutOfRange { bit: 16, bits: 16 })
        );
        assert_eq!(now.buttons, 0b1000_0000_0000_1000);
        assert!(now.just_pressed(&prev, 3));
        assert!(!now.just_released(&prev, 3));
        assert!(!now.just_pressed(&now, 3), "held, not just pressed");
        prev = now;
        now.set_pressed(3, false).unwrap();
        assert!(now.just_released(&prev, 3));
        assert!(!now.just_pressed(&prev, 3));
        assert!(!now.just_released(&prev, 15), "still held");
        assert!(!now.just_pressed(&prev, 200) && !now.just_released(&prev, 200));
    }

    #[test]
    fn encoder_encodes_a_real_action_state() {
        let encoder = InputEncoder::new()
            .button(Action::Jump, 0)
            .and_then(|e| e.button(Action::Fire, 9))
            .and_then(|e| e.axis(Action::Throttle, 1))
            .expect("valid mapping");
        let mut state = ActionState::<Action>::default();
        assert_eq!(encoder.encode(&state), PackedInput::default());
        state.press(&Action::Fire);
        state.set_value(&Action::Throttle, 0.5);
        assert_eq!(
            encoder.encode(&state),
            PackedInput {
                buttons: 1 << 9,
                axes: [0, 64]
            }
        );
        state.press(&Action::Jump);
        state.release(&Action::Fire);
        state.set_value(&Action::Throttle, -3.0);
        assert_eq!(
            encoder.encode(&state),
            PackedInput {
                buttons: 1,
                axes: [0, -127]
            }
        );

        let dual = InputEncoder::new()
            .dual_axis(Action::Move, 1, 0)
            .expect("valid mapping");
        state.set_axis_pair(&Action::Move, Vec2::new(0.25, -2.0));
        assert_eq!(
            dual.encode(&state),
            PackedInput {
                buttons: 0,
                axes: [-127, 32]
            }
        );
    }

    #[test]
    fn encoder_rejects_bad_mappings() {
        let e = || InputEncoder::<Action>::new();
        assert_eq!(
            e().button(Action::Jump, 16).unwrap_err(),
            InputError::BitOutOfRange { bit: 16, bits: 16 }
        );
        assert_eq!(
            e().button(Action::Jump, 2)
                .and_then(|e| e.button(Action::Fire, 2))
                .unwrap_err(),
            InputError::BitAlreadyMapped { bit: 2 }
        );
        assert_eq!(
            e().axis(Action::Throttle, 2).unwrap_err(),
            InputError::AxisSlotOutOfRange { slot: 2, slots: 2 }
        );
        assert_eq!(
            e().axis(Action::Throttle, 0)
                .and_then(|e| e.dual_axis(Action::Move, 1, 0))
                .unwrap_err(),
            InputError::AxisSlotAlreadyMapped { slot: 0 }
        );
        assert_eq!(
            e().dual_axis(Action::Move, 1, 1).unwrap_err(),
            InputError::AxisSlotAlreadyMapped { slot: 1 }
        );
        assert_eq!(
            e().button(Action::Throttle, 0).unwrap_err(),
            InputError::WrongActionKind {
                action: "Throttle".into(),
                expected: "Button",
                found: "Axis"
            }
        );
        assert_eq!(
            e().axis(Action::Jump, 0).unwrap_err(),
            InputError::WrongActionKind {
                action: "Jump".into(),
                expected: "Axis",
                found: "Button"
            }
        );
        assert_eq!(
            e().dual_axis(Action::Throttle, 0, 1).unwrap_err(),
            InputError::WrongActionKind {
                action: "Throttle".into(),
                expected: "DualAxis",
                found: "Axis"
            }
        );
    }
}
