//! Errors of loading the sandbox's asset files (scenes and traces).

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a scene or trace file could not be loaded. Every variant names the file; its `Display` is
/// one line meant for stderr.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid RON for its format.
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// ron's description of the error.
        message: String,
    },
    /// The file parsed but a value is out of range or inconsistent.
    Invalid {
        /// The file.
        path: PathBuf,
        /// Which kind of file ("scene" or "trace").
        kind: &'static str,
        /// The field at fault, as a path (`piles[1].count`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl LoadError {
    /// Reads `path` as text.
    ///
    /// # Errors
    /// [`LoadError::Io`] naming the file.
    pub fn read(path: &Path) -> Result<String, LoadError> {
        std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A parse error of `path` from ron's spanned error (position of its start).
    pub fn parse(path: &Path, error: ron::error::SpannedError) -> LoadError {
        LoadError::Parse {
            path: path.to_path_buf(),
            line: error.span.start.line,
            column: error.span.start.col,
            message: error.code.to_string(),
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            LoadError::Parse {
                path,
                line,
                column,
                message,
            } => write!(f, "{}:{line}:{column}: {message}", path.display()),
            LoadError::Invalid {
                path,
                kind,
                field,
                reason,
            } => write!(f, "{}: invalid {kind}: `{field}` {reason}", path.display()),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
