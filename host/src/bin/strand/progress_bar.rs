//! The terminal progress bar of long CLI operations (rebuilds, a deployed projector's build).

/// Redraws the bar on stderr's current line: `label [####      ] done/total`.
pub fn draw(label: &str, done: u64, total: u64) {
    const WIDTH: usize = 30;
    // Writes during a build can make `done` pass the first count.
    let filled = (done * WIDTH as u64).checked_div(total).map_or(WIDTH, |f| (f as usize).min(WIDTH));
    eprint!("\r{label:>12} [{}{}] {done}/{total}", "#".repeat(filled), " ".repeat(WIDTH - filled));
}
