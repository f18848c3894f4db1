//! The process's own numbers for `/metrics` ([operations](crate::rules#operations)), read from
//! Linux's `/proc/self` at each scrape: CPU time, memory, open file descriptors, threads and
//! start time. [`ProcessSample::parse`] is the pure part; [`ProcessSample::read`] reads the
//! files (and gives `None` where there is no `/proc`).

use std::path::Path;

/// Clock ticks per second of `/proc`'s times (the kernel's `USER_HZ`, 100 on every Linux
/// architecture the server is built for).
pub const USER_HZ: f64 = 100.0;

/// One reading of the process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessSample {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors (sockets included).
    pub open_fds: u64,
    /// The soft limit of open file descriptors, if any.
    pub max_fds: Option<u64>,
    /// When the process started, in Unix seconds.
    pub start_time_seconds: f64,
}

/// The text of the `/proc` files a sample is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcFiles {
    /// `/proc/self/stat`.
    pub stat: String,
    /// `/proc/self/status`.
    pub status: String,
    /// `/proc/self/limits`.
    pub limits: String,
    /// `/proc/stat` (the boot time).
    pub system_stat: String,
    /// Entries of `/proc/self/fd`.
    pub open_fds: u64,
}

/// A `kB` line of `/proc/self/status` (`VmRSS:  1234 kB`), in bytes.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

impl ProcessSample {
    /// A sample from the files' text, or `None` when `stat` or `/proc/stat`'s boot time does
    /// not read. `stat`'s fields are counted after the command name's closing parenthesis
    /// (a name may hold spaces): utime and stime (fields 14 and 15) and starttime (22), in
    /// [`USER_HZ`] ticks.
    pub fn parse(files: &ProcFiles) -> Option<Self> {
        let after_name = &files.stat[files.stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // `fields[0]` is field 3 (the state).
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let ticks = field(14)? + field(15)?;
        let boot = files
            .system_stat
            .lines()
            .find_map(|line| line.strip_prefix("btime "))?
            .trim()
            .parse::<u64>()
            .ok()?;
        let max_fds = files
            .limits
            .lines()
            .find_map(|line| line.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok());
        Some(Self {
            cpu_seconds: ticks as f64 / USER_HZ,
            resident_bytes: status_kib(&files.status, "VmRSS").unwrap_or(0),
            virtual_bytes: status_kib(&files.status, "VmSize").unwrap_or(0),
            threads: files
                .status
                .lines()
                .find_map(|line| line.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0),
            open_fds: files.open_fds,
            max_fds,
            start_time_seconds: boot as f64 + field(22)? as f64 / USER_HZ,
        })
    }

    /// Reads this process's files; `None` without `/proc` (not Linux) or when they do not
    /// read.
    pub fn read() -> Option<Self> {
        let proc = Path::new("/proc");
        let text = |path: &str| std::fs::read_to_string(proc.join(path)).ok();
        let files = ProcFiles {
            stat: text("self/stat")?,
            status: text("self/status").unwrap_or_default(),
            limits: text("self/limits").unwrap_or_default(),
            system_stat: text("stat")?,
            open_fds: std::fs::read_dir(proc.join("self/fd"))
                .map(|dir| dir.count() as u64)
                .unwrap_or(0),
        };
        Self::parse(&files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> ProcFiles {
        ProcFiles {
            // A command name with a space and a parenthesis.
            stat: "4242 (simsync (srv) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 7 0 123400 1000000 3000 18446744073709551615".into(),
            status: "Name:\tsimsync\nVmSize:\t  20480 kB\nVmRSS:\t   1024 kB\nThreads:\t7\n".into(),
            limits: "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 4096                 files\n".into(),
            system_stat: "cpu  1 2 3\nbtime 1700000000\nprocesses 10\n".into(),
            open_fds: 12,
        }
    }

    #[test]
    fn a_sample_reads_every_number_from_the_proc_files() {
        let sample = ProcessSample::parse(&files()).unwrap();
        assert_eq!(sample.cpu_seconds, 3.0);
        assert_eq!(sample.resident_bytes, 1024 * 1024);
        assert_eq!(sample.virtual_bytes, 20_480 * 1024);
        assert_eq!(sample.threads, 7);
        assert_eq!(sample.open_fds, 12);
        assert_eq!(sample.max_fds, Some(1024));
        assert_eq!(sample.start_time_seconds, 1_700_000_000.0 + 1_234.0);
    }

    #[test]
    fn missing_or_damaged_files_give_no_sample_instead_of_wrong_numbers() {
        let mut no_boot = files();
        no_boot.system_stat = "cpu 1\n".into();
        assert_eq!(ProcessSample::parse(&no_boot), None);
        let mut short = files();
        short.stat = "4242 (srv) S 1 2".into();
        assert_eq!(ProcessSample::parse(&short), None);
        assert_eq!(ProcessSample::parse(&ProcFiles::default()), None);
    }

    #[test]
    fn this_process_reads_on_linux() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let sample = ProcessSample::read().expect("/proc reads");
        assert!(sample.threads >= 1);
        assert!(sample.open_fds >= 3);
        assert!(sample.resident_bytes > 0);
    }
}
