//! An M/M/1 queue run on `VirtualTimePlugin` alone, checked against queueing theory.
//!
//! Customers arrive as a Poisson process (rate λ per second) at one server whose service times
//! are exponential (rate μ per second). The simulation is discrete-event: each arrival and each
//! departure is an event in a `VirtualEventQueue`, the plugin's clock jumps straight from one
//! event to the next (`AdvancePolicy::NextEvent`) and observers handle them, scheduling the
//! next ones. At the end the example prints the mean waiting time in the queue and the server's
//! utilisation next to the textbook values, Wq = λ / (μ(μ − λ)) and ρ = λ/μ, and exits with 1
//! if either differs from theory by more than `--sigmas` (default 4) of its own standard error.
//! The random numbers come from a seeded generator, so two runs with the same seed print the same
//! numbers.
//!
//! The gate is statistical, not a fixed percentage: successive waiting times are strongly
//! correlated, the more so the busier the server (at ρ = 0.9 a run of 10⁶ customers has a
//! standard error of about 2 % on Wq, at ρ = 0.5 about 0.3 %), so a fixed 2 % gate fails
//! correct runs at high load on chance alone. The standard error is estimated by batch means:
//! the customers are split into 32 consecutive batches of equal size, each batch's mean wait
//! (and its busy time over its span of arrivals, for ρ) is one nearly independent sample, and the
//! standard error is the batches' standard deviation over √32. Four standard errors is a false
//! alarm about once in 10,000 runs for a correct model (Student's t with 31 degrees of freedom:
//! p ≈ 4 × 10⁻⁴), while an error of a few standard errors still fails.
//!
//! ```text
//! cargo run --ignore-rust-version --release --example queue_sim -- --customers 1000000 --lambda 2.5 --mu 5 --seed 7
//! ```
//!
//! Exit codes: 0 within tolerance, 1 outside it, 2 bad arguments.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

use bevy::prelude::*;
use clap::Parser;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Exp};
use simsync_time::prelude::*;

/// Virtual ticks per second: one tick is a microsecond, far finer than the mean gap between
/// events, so rounding times to ticks changes the results by far less than the tolerance.
const TICKS_PER_SECOND: u32 = 1_000_000;

/// Events per frame of the jump-to-next-event clock.
const EVENTS_PER_FRAME: u32 = 100_000;

#[derive(Parser, Debug)]
#[command(about = "M/M/1 queue on simsync_time's discrete-event clock, checked against theory")]
struct Args {
    /// Customers to serve.
    #[arg(long, default_value_t = 1_000_000)]
    customers: u64,
    /// Arrival rate λ, customers per second.
    #[arg(long, default_value_t = 2.5)]
    lambda: f64,
    /// Service rate μ, customers per second (must exceed λ).
    #[arg(long, default_value_t = 5.0)]
    mu: f64,
    /// Seed of the random number generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest accepted difference from theory, in standard errors of the measured value
    /// (estimated by batch means).
    #[arg(long, default_value_t = 4.0)]
    sigmas: f64,
}

/// A measured value and its standard error, when there were enough batches.
type Estimate = Option<(f64, f64)>;

/// Batches of the batch-means estimate of the standard error.
const BATCHES: usize = 32;

/// What one batch of consecutive customers measured (by arrival order).
#[derive(Debug, Clone, Copy, Default)]
struct Batch {
    /// Customers whose service started.
    started: u64,
    /// Their total wait, in ticks.
    wait_ticks: u128,
    /// Their total service time, in ticks.
    busy_ticks: u128,
    /// Arrival instants of the batch's first customer and of the next batch's first customer.
    first_arrival: i64,
    next_arrival: i64,
}

/// A ratio estimate `Σ x / Σ y` over batches and its standard error by batch means (the
/// delta method: the spread of `x_b − r·y_b` over the batches, divided by the mean `y`).
/// `None` with fewer than two batches or no denominator.
fn ratio_with_error(pairs: &[(f64, f64)]) -> Estimate {
    let n = pairs.len();
    let (sx, sy) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    if n < 2 || sy <= 0.0 {
        return None;
    }
    let r = sx / sy;
    let var = pairs.iter().map(|(x, y)| (x - r * y).powi(2)).sum::<f64>() / (n - 1) as f64;
    let mean_y = sy / n as f64;
    Some((r, (var / n as f64).sqrt() / mean_y))
}

/// The two events of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Customer {
    Arrives,
    Leaves,
}

/// The queue, the server and the statistics.
#[derive(Resource)]
struct Model {
    rng: Xoshiro256PlusPlus,
    between_arrivals: Exp<f64>,
    service: Exp<f64>,
    rate: TickRate,
    /// Arrival instants of the customers waiting for the server, oldest first.
    line: VecDeque<VirtualInstant>,
    busy: bool,
    arrived: u64,
    started: u64,
    served: u64,
    customers: u64,
    wait_ticks: u128,
    busy_ticks: u128,
    end: VirtualInstant,
    /// Arrival instants of the customers in `line`, by their arrival number (batching).
    line_numbers: VecDeque<u64>,
    /// Customers per batch.
    batch_size: u64,
    batches: Vec<Batch>,
}

impl Model {
    /// A sample of `dist` in whole ticks (at least 0).
    fn sample_ticks(&mut self, exponential_service: bool) -> i64 {
        let dist = if exponential_service {
            self.service
        } else {
            self.between_arrivals
        };
        let seconds = dist.sample(&mut self.rng);
        // Exponential samples are finite and far below the i64 tick range.
        self.rate
            .seconds_to_ticks(seconds)
            .unwrap_or(i64::MAX)
            .max(0)
    }

    /// The batch of customer number `number` (0-based arrival order; the last batch takes the
    /// remainder).
    fn batch_of(&self, number: u64) -> usize {
        ((number / self.batch_size) as usize).min(BATCHES - 1)
    }

    /// Customer number `number` arrives at `now`: opens its batch when it is the first.
    fn on_arrival(&mut self, number: u64, now: VirtualInstant) {
        let b = self.batch_of(number);
        if number == b as u64 * self.batch_size {
            self.batches[b].first_arrival = now.ticks;
            if b > 0 {
                self.batches[b - 1].next_arrival = now.ticks;
            }
        }
    }

    /// Starts serving customer number `number`, who arrived at `arrived`; returns when it will
    /// leave.
    fn start_service(
        &mut self,
        now: VirtualInstant,
        arrived: VirtualInstant,
        number: u64,
    ) -> VirtualInstant {
        self.busy = true;
        self.started += 1;
        let wait = (now.ticks - arrived.ticks) as u128;
        self.wait_ticks += wait;
        let service = self.sample_ticks(true);
        self.busy_ticks += service as u128;
        let b = self.batch_of(number);
        let batch = &mut self.batches[b];
        batch.started += 1;
        batch.wait_ticks += wait;
        batch.busy_ticks += service as u128;
        now + service
    }

    /// Wq and ρ with their standard errors by batch means, in seconds and as a fraction.
    fn estimates(&self, rate: f64) -> (Estimate, Estimate) {
        let complete: Vec<&Batch> = self.batches.iter().filter(|b| b.started > 0).collect();
        let waits: Vec<(f64, f64)> = complete
            .iter()
            .map(|b| (b.wait_ticks as f64 / rate, b.started as f64))
            .collect();
        // The last batch's span ends at the last departure.
        let end = self.end.ticks;
        let busy: Vec<(f64, f64)> = complete
            .iter()
            .map(|b| {
                let until = if b.next_arrival > b.first_arrival {
                    b.next_arrival
                } else {
                    end
                };
                (b.busy_ticks as f64, (until - b.first_arrival) as f64)
            })
            .collect();
        (ratio_with_error(&waits), ratio_with_error(&busy))
    }
}

/// The observer of both events: the whole model's logic.
fn on_customer(
    event: On<VirtualEvent<Customer>>,
    now: Res<CurrentInstant>,
    mut model: ResMut<Model>,
    mut queue: ResMut<VirtualEventQueue<Customer>>,
) {
    let now = now.0;
    match event.event {
        Customer::Arrives => {
            let number = model.arrived;
            model.on_arrival(number, now);
            model.arrived += 1;
            if model.arrived < model.customers {
                let gap = model.sample_ticks(false);
                queue.schedule(now + gap, Customer::Arrives);
            }
            if model.busy {
                model.line.push_back(now);
                model.line_numbers.push_back(number);
            } else {
                let leaves = model.start_service(now, now, number);
                queue.schedule(leaves, Customer::Leaves);
            }
        }
        Customer::Leaves => {
            model.served += 1;
            model.end = now;
            model.busy = false;
            if let (Some(arrived), Some(number)) =
                (model.line.pop_front(), model.line_numbers.pop_front())
            {
                let leaves = model.start_service(now, arrived, number);
                queue.schedule(leaves, Customer::Leaves);
            }
        }
    }
}

fn relative(measured: f64, theory: f64) -> f64 {
    (measured - theory) / theory
}

/// Prints one measured value beside theory with its standard error; whether it is within
/// `sigmas` standard errors of theory.
fn report(name: &str, measured: f64, theory: f64, se: f64, unit: &str, sigmas: f64) -> bool {
    let z = (measured - theory) / se;
    println!(
        "{name:<21} {measured:.6} {unit:<2} theory {theory:.6} {unit:<2} {:+.3} %   standard error {:.3} %   {z:+.2} σ",
        relative(measured, theory) * 100.0,
        se / theory * 100.0,
    );
    z.abs() <= sigmas
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("queue_sim: {message}");
            ExitCode::from(2)
        }
    }
}

fn build(args: &Args) -> Result<App, String> {
    let valid = |x: f64| x.is_finite() && x > 0.0;
    if !(valid(args.lambda) && valid(args.mu) && args.lambda < args.mu) {
        return Err(format!(
            "need 0 < λ < μ (finite), got λ = {}, μ = {}",
            args.lambda, args.mu
        ));
    }
    if args.customers < 2 * BATCHES as u64 {
        return Err(format!(
            "need at least {} customers (two per batch of the error estimate)",
            2 * BATCHES
        ));
    }
    if !(args.sigmas.is_finite() && args.sigmas > 0.0) {
        return Err(format!("need --sigmas > 0, got {}", args.sigmas));
    }
    let rate = TickRate::new(TICKS_PER_SECOND).map_err(|e| e.to_string())?;
    let budget = FrameBudget::events(EVENTS_PER_FRAME).map_err(|e| e.to_string())?;
    let model = Model {
        rng: Xoshiro256PlusPlus::seed_from_u64(args.seed),
        between_arrivals: Exp::new(args.lambda).map_err(|e| e.to_string())?,
        service: Exp::new(args.mu).map_err(|e| e.to_string())?,
        rate,
        line: VecDeque::new(),
        busy: false,
        arrived: 0,
        started: 0,
        served: 0,
        customers: args.customers,
        wait_ticks: 0,
        busy_ticks: 0,
        end: VirtualInstant::ZERO,
        line_numbers: VecDeque::new(),
        batch_size: args.customers / BATCHES as u64,
        batches: vec![Batch::default(); BATCHES],
    };
    let mut app = App::new();
    app.add_plugins(
        VirtualTimePlugin::default()
            .tick_rate(rate)
            .advance(AdvancePolicy::NextEvent(budget)),
    )
    .add_virtual_events::<Customer>(Delivery::Observers)
    .insert_resource(model)
    .add_observer(on_customer);
    app.world_mut()
        .resource_mut::<VirtualEventQueue<Customer>>()
        .schedule(VirtualInstant::ZERO, Customer::Arrives);
    Ok(app)
}

fn run(args: &Args) -> Result<bool, String> {
    let mut app = build(args)?;
    let started = Instant::now();
    let mut frames = 0_u64;
    while app.world().resource::<Model>().served < args.customers {
        app.update();
        frames += 1;
        if app
            .world()
            .resource::<VirtualClock>()
            .next_event()
            .is_infinity()
            && app.world().resource::<Model>().served < args.customers
        {
            return Err("the event queue ran dry before every customer was served".into());
        }
    }
    let wall = started.elapsed();
    let model = app.world().resource::<Model>();
    let clock = app.world().resource::<VirtualClock>();
    let rate = f64::from(TICKS_PER_SECOND);
    let wq = model.wait_ticks as f64 / rate / model.started as f64;
    let rho = model.busy_ticks as f64 / model.end.ticks as f64;
    let wq_theory = args.lambda / (args.mu * (args.mu - args.lambda));
    let rho_theory = args.lambda / args.mu;
    let (wq_batches, rho_batches) = model.estimates(rate);
    let (Some((_, wq_se)), Some((_, rho_se))) = (wq_batches, rho_batches) else {
        return Err("too few customers for the batch-means error estimate".into());
    };
    println!(
        "M/M/1, λ = {} /s, μ = {} /s, {} customers, seed {} ({} events, {} frames, clock {} ticks/s, jump to next event)",
        args.lambda,
        args.mu,
        model.served,
        args.seed,
        clock.stats().events_dispatched,
        frames,
        TICKS_PER_SECOND
    );
    println!(
        "gate: |measured − theory| ≤ {} standard errors (batch means, {BATCHES} batches of {} customers)",
        args.sigmas, model.batch_size
    );
    let wq_ok = report(
        "mean waiting time Wq",
        wq,
        wq_theory,
        wq_se,
        "s",
        args.sigmas,
    );
    let rho_ok = report("utilisation ρ", rho, rho_theory, rho_se, "", args.sigmas);
    eprintln!(
        "wall time {:.3} s ({:.2} M events/s)",
        wall.as_secs_f64(),
        clock.stats().events_dispatched as f64 / wall.as_secs_f64() / 1e6
    );
    let ok = wq_ok && rho_ok;
    if !ok {
        println!(
            "FAIL: a value differs from theory by more than {} standard errors",
            args.sigmas
        );
    }
    Ok(ok)
}
