//! An M/M/1 queue run on `VirtualTimePlugin` alone, checked against queueing theory.
//!
//! Customers arrive as a Poisson process (rate λ per second) at one server whose service times
//! are exponential (rate μ per second). The simulation is discrete-event: each arrival and each
//! departure is an event in a `VirtualEventQueue`, the plugin's clock jumps straight from one
//! event to the next (`AdvancePolicy::NextEvent`) and observers handle them, scheduling the
//! next ones. At the end the example prints the mean waiting time in the queue and the server's
//! utilisation next to the textbook values, Wq = λ / (μ(μ − λ)) and ρ = λ/μ, and exits with 1
//! if either differs by more than the tolerance (2 % by default). The random numbers come from a
//! seeded generator, so two runs with the same seed print the same numbers.
//!
//! ```text
//! cargo run --release --example queue_sim -- --customers 1000000 --lambda 2.5 --mu 5 --seed 7
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
    /// Largest accepted relative difference from theory (0.02 = 2 %).
    #[arg(long, default_value_t = 0.02)]
    tolerance: f64,
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

    /// Starts serving a customer who arrived at `arrived`; returns when it will leave.
    fn start_service(&mut self, now: VirtualInstant, arrived: VirtualInstant) -> VirtualInstant {
        self.busy = true;
        self.started += 1;
        self.wait_ticks += (now.ticks - arrived.ticks) as u128;
        let service = self.sample_ticks(true);
        self.busy_ticks += service as u128;
        now + service
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
            model.arrived += 1;
            if model.arrived < model.customers {
                let gap = model.sample_ticks(false);
                queue.schedule(now + gap, Customer::Arrives);
            }
            if model.busy {
                model.line.push_back(now);
            } else {
                let leaves = model.start_service(now, now);
                queue.schedule(leaves, Customer::Leaves);
            }
        }
        Customer::Leaves => {
            model.served += 1;
            model.end = now;
            model.busy = false;
            if let Some(arrived) = model.line.pop_front() {
                let leaves = model.start_service(now, arrived);
                queue.schedule(leaves, Customer::Leaves);
            }
        }
    }
}

fn relative(measured: f64, theory: f64) -> f64 {
    (measured - theory) / theory
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
    if args.customers == 0 {
        return Err("need at least one customer".into());
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
    let (dw, dr) = (relative(wq, wq_theory), relative(rho, rho_theory));
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
        "mean waiting time Wq  {wq:.6} s   theory {wq_theory:.6} s   {:+.3} %",
        dw * 100.0
    );
    println!(
        "utilisation ρ         {rho:.6}     theory {rho_theory:.6}     {:+.3} %",
        dr * 100.0
    );
    eprintln!(
        "wall time {:.3} s ({:.2} M events/s)",
        wall.as_secs_f64(),
        clock.stats().events_dispatched as f64 / wall.as_secs_f64() / 1e6
    );
    let ok = dw.abs() <= args.tolerance && dr.abs() <= args.tolerance;
    if !ok {
        println!(
            "FAIL: a value differs from theory by more than {} %",
            args.tolerance * 100.0
        );
    }
    Ok(ok)
}
