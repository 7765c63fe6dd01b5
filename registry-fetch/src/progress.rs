//! Download progress reporting. The installer only knows the `Progress` trait; the CLI picks a
//! terminal bar when stderr is a TTY and `NoProgress` otherwise, so logs and CI output stay clean.

use std::io::IsTerminal as _;

/// Receives the life of one download.
pub trait Progress: Send + Sync {
    /// A download starts; `total` is the announced size, if any.
    fn start(&self, total: Option<u64>);
    fn advance(&self, bytes: u64);
    fn finish(&self);
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// An `indicatif` bar on stderr, labelled with what is being downloaded.
#[derive(Debug)]
pub struct TerminalProgress {
    bar: indicatif::ProgressBar,
}

impl TerminalProgress {
    pub fn new(label: &str) -> Self {
        let bar = indicatif::ProgressBar::hidden();
        bar.set_message(label.to_string());
        Self { bar }
    }

    /// A terminal bar when stderr is a terminal, otherwise nothing.
    pub fn for_stderr(label: &str) -> Box<dyn Progress> {
        if std::io::stderr().is_terminal() {
            Box::new(Self::new(label))
        } else {
            Box::new(NoProgress)
        }
    }
}

impl Progress for TerminalProgress {
    fn start(&self, total: Option<u64>) {
        let style = match total {
            Some(n) => {
                self.bar.set_length(n);
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                )
            }
            None => {
                indicatif::ProgressStyle::with_template("{msg} {spinner} {bytes} {bytes_per_sec}")
            }
        };
        if let Ok(style) = style {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_position(0);
        self.bar
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }

    fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
