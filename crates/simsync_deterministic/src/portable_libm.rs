//! The C math library's transcendental functions, defined in the binary and computed by the
//! pure-Rust `libm` crate (rules: "Determinism across builds and platforms").
//!
//! Rapier's `enhanced-determinism` routes most of its math through `libm`, but not all of it:
//! Rapier 0.36's joint constraints (`sin`/`cos` of joint angles), soft bodies, parry's BVH
//! optimization (`log2`, every step) and triangle-mesh normals (`acos`), and glamx's symmetric
//! eigen decomposition (`acos`, `cos`, for inertia tensors) still call `f32::sin` and its kin,
//! which the compiler turns into calls of the platform's `sinf`, `sincosf`, `log2f`, …. With the
//! `enhanced-determinism` feature on Linux, this module defines those C symbols in the
//! executable itself, so the linker binds every such call in the program's Rust code (Rapier's,
//! parry's, glamx's, Bevy's and the game's) to the same `libm` code on every machine, never to
//! glibc's or the system's. Shared libraries loaded by the program keep their own math.
//!
//! [`link`] is called by `DeterministicPlugin::build`: it takes the functions' addresses, so the
//! linker keeps this module whenever the plugin is in the program. Not done on macOS, where the
//! compiler turns a sine and cosine of one angle into `__sincosf_stret` and powers of ten into
//! `__exp10f`, which this module does not define, nor on Windows, where the MSVC toolchain links
//! the C runtime's math: there Rapier's remaining calls use the system's (see the rules). Each function is the `libm` function of the same name; `sincos`
//! and `sincosf` write through their two pointers as the C library's do.

/// Defines `extern "C" fn $name(args) -> ret` as `libm::$name`.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[doc = concat!("The C library's `", stringify!($name), "`, computed by `libm::", stringify!($name), "`.")]
            #[unsafe(no_mangle)]
            pub extern "C" fn $name($($arg: $ty),*) -> $ret {
                libm::$name($($arg),*)
            }
        )*
        /// Every defined function's address (what [`link`] keeps).
        const FUNCTIONS: &[*const ()] = &[$($name as *const ()),*];
    };
}

forward! {
    sinf(x: f32) -> f32; cosf(x: f32) -> f32; tanf(x: f32) -> f32;
    asinf(x: f32) -> f32; acosf(x: f32) -> f32; atanf(x: f32) -> f32;
    atan2f(y: f32, x: f32) -> f32;
    sinhf(x: f32) -> f32; coshf(x: f32) -> f32; tanhf(x: f32) -> f32;
    asinhf(x: f32) -> f32; acoshf(x: f32) -> f32; atanhf(x: f32) -> f32;
    expf(x: f32) -> f32; exp2f(x: f32) -> f32; expm1f(x: f32) -> f32;
    logf(x: f32) -> f32; log2f(x: f32) -> f32; log10f(x: f32) -> f32; log1pf(x: f32) -> f32;
    powf(x: f32, y: f32) -> f32; cbrtf(x: f32) -> f32; hypotf(x: f32, y: f32) -> f32;
    sin(x: f64) -> f64; cos(x: f64) -> f64; tan(x: f64) -> f64;
    asin(x: f64) -> f64; acos(x: f64) -> f64; atan(x: f64) -> f64;
    atan2(y: f64, x: f64) -> f64;
    sinh(x: f64) -> f64; cosh(x: f64) -> f64; tanh(x: f64) -> f64;
    asinh(x: f64) -> f64; acosh(x: f64) -> f64; atanh(x: f64) -> f64;
    exp(x: f64) -> f64; exp2(x: f64) -> f64; expm1(x: f64) -> f64;
    log(x: f64) -> f64; log2(x: f64) -> f64; log10(x: f64) -> f64; log1p(x: f64) -> f64;
    pow(x: f64, y: f64) -> f64; cbrt(x: f64) -> f64; hypot(x: f64, y: f64) -> f64;
}

/// The C library's `sincosf` (a GNU extension the compiler emits for a `sin` and a `cos` of the
/// same angle): `libm::sincosf`, written through `s` and `c`.
///
/// # Safety
/// `s` and `c` are valid for a write of one `f32` each, as the C function requires.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sincosf(x: f32, s: *mut f32, c: *mut f32) {
    let (sin, cos) = libm::sincosf(x);
    // SAFETY: the caller passes two writable `f32` locations (the C contract of sincosf).
    unsafe {
        s.write(sin);
        c.write(cos);
    }
}

/// The C library's `sincos` (`f64`): `libm::sincos`, written through `s` and `c`.
///
/// # Safety
/// `s` and `c` are valid for a write of one `f64` each, as the C function requires.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sincos(x: f64, s: *mut f64, c: *mut f64) {
    let (sin, cos) = libm::sincos(x);
    // SAFETY: the caller passes two writable `f64` locations (the C contract of sincos).
    unsafe {
        s.write(sin);
        c.write(cos);
    }
}

/// Keeps this module's functions in the linked program (called by `DeterministicPlugin::build`):
/// the number of functions defined, 48.
pub(crate) fn link() -> usize {
    let all = [FUNCTIONS, &[sincosf as *const (), sincos as *const ()]];
    std::hint::black_box(all).iter().map(|f| f.len()).sum()
}

#[cfg(test)]
mod tests {
    /// The same values as `libm`, bit for bit, and through `f32::sin` and its kin as well: in
    /// this test binary the linker bound the standard library's calls to these definitions.
    #[test]
    fn std_math_in_this_binary_is_libm_bit_for_bit() {
        assert_eq!(super::link(), 48);
        let angles = [0.1f32, 0.7, 1.3, 2.9, -4.2, 100.5, 1.0e4];
        for x in angles {
            let x = std::hint::black_box(x);
            assert_eq!(x.sin().to_bits(), libm::sinf(x).to_bits(), "sin {x}");
            assert_eq!(x.cos().to_bits(), libm::cosf(x).to_bits(), "cos {x}");
            assert_eq!(
                x.abs().log2().to_bits(),
                libm::log2f(x.abs()).to_bits(),
                "log2 {x}"
            );
            assert_eq!(x.exp().to_bits(), libm::expf(x).to_bits(), "exp {x}");
            let (s, c) = x.sin_cos();
            assert_eq!(
                (s.to_bits(), c.to_bits()),
                (libm::sinf(x).to_bits(), libm::cosf(x).to_bits())
            );
            let y = f64::from(x);
            assert_eq!(y.sin().to_bits(), libm::sin(y).to_bits(), "sin {y}");
            assert_eq!(
                y.powf(1.5).to_bits(),
                libm::pow(y, 1.5).to_bits(),
                "pow {y}"
            );
        }
    }

    /// The symbol check: this test binary (which runs Rapier scenes in the crate's other tests)
    /// imports none of the C library's transcendental functions.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_binary_imports_no_transcendental_function_of_the_platform() {
        use object::{Object, ObjectSymbol};
        let exe = std::env::current_exe().expect("the test binary's path");
        let bytes = std::fs::read(&exe).expect("the test binary reads");
        let file = object::File::parse(&*bytes).expect("an ELF file");
        let imported: Vec<String> = file
            .dynamic_symbols()
            .filter(|symbol| symbol.is_undefined())
            .filter_map(|symbol| symbol.name().ok().map(str::to_string))
            .collect();
        assert!(
            imported.iter().any(|name| name == "memcpy"),
            "the dynamic symbols were read: {} imports",
            imported.len()
        );
        let math: Vec<&String> = imported
            .iter()
            .filter(|name| is_transcendental(name))
            .collect();
        assert!(math.is_empty(), "imports of the platform's libm: {math:?}");
    }

    /// A C math function whose result the platform's library rounds its own way.
    #[cfg(target_os = "linux")]
    fn is_transcendental(name: &str) -> bool {
        const NAMES: &[&str] = &[
            "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
            "acosh", "atanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow",
            "cbrt", "hypot", "sincos", "erf", "erfc", "tgamma", "lgamma",
        ];
        let base = name.split('@').next().unwrap_or(name);
        let base = base
            .strip_suffix('f')
            .filter(|b| NAMES.contains(b))
            .unwrap_or(base);
        NAMES.contains(&base)
    }
}
