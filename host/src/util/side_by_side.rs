//! Tenants' work of one batch run side by side, and the grace a slow one gets once the others are done:
//! the relay's routing and the workers' projecting both wait for the slowest tenant before the batch
//! commits, so one tenant's spinning plugin would hold every other tenant's *next* batch for its whole
//! budget. Past the grace its work is set aside (parked, tried beside the live path) instead.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long a tenant's work may run on after another tenant's finished, with no tenant finishing
/// meanwhile.
pub const OUTPACED_AFTER: Duration = Duration::from_millis(50);
/// How long every tenant's work may run whatever the others do: a tenant finishing at once (one cheap event
/// a batch, say) cannot get its neighbours' ordinary work set aside.
pub const OUTPACED_NOT_BEFORE: Duration = Duration::from_millis(100);

/// One batch's tenants: when it started, and when the last of them finished their work.
pub struct SideBySide {
    started: Instant,
    finished: watch::Sender<Option<Instant>>,
}

impl Default for SideBySide {
    fn default() -> Self {
        Self { started: Instant::now(), finished: watch::channel(None).0 }
    }
}

impl SideBySide {
    /// Notes that one tenant's work finished (whatever its outcome; a tenant whose events were only set
    /// aside, with no plugin asked, did no work and is not noted).
    pub fn finished(&self) {
        self.finished.send_replace(Some(Instant::now()));
    }

    /// Resolves once some tenant finished and none did for [`OUTPACED_AFTER`] since, and not before
    /// [`OUTPACED_NOT_BEFORE`] into the batch: the work still running then is outpaced. Never, while no
    /// tenant finished (alone in its batch, a tenant has its whole budget).
    pub fn outpaced(&self) -> impl Future<Output = ()> + use<> {
        let mut finished = self.finished.subscribe();
        let not_before = self.started + OUTPACED_NOT_BEFORE;
        async move {
            loop {
                let last = *finished.borrow_and_update();
                let Some(last) = last else {
                    if finished.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    continue;
                };
                // A finish seen with the grace's end is taken first: the grace starts over from it.
                tokio::select! {
                    biased;
                    changed = finished.changed() => if changed.is_err() {
                        std::future::pending::<()>().await;
                    },
                    () = tokio::time::sleep_until((last + OUTPACED_AFTER).max(not_before)) => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_is_outpaced_once_the_others_stopped_finishing_for_the_grace() {
        let batch = SideBySide::default();
        let mut slow = std::pin::pin!(batch.outpaced());
        batch.finished();
        tokio::time::sleep(OUTPACED_AFTER * 3 / 2).await;
        assert!(futures::poll!(slow.as_mut()).is_pending(), "not before its floor into the batch");
        tokio::time::sleep(OUTPACED_NOT_BEFORE).await;
        assert!(futures::poll!(slow.as_mut()).is_ready());

        let batch = SideBySide::default();
        let mut slow = std::pin::pin!(batch.outpaced());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(futures::poll!(slow.as_mut()).is_pending(), "no other tenant finished: never outpaced");
        batch.finished();
        tokio::time::sleep(OUTPACED_AFTER / 2).await;
        assert!(futures::poll!(slow.as_mut()).is_pending());
        batch.finished();
        tokio::time::sleep(OUTPACED_AFTER * 3 / 4).await;
        assert!(futures::poll!(slow.as_mut()).is_pending(), "another finished meanwhile: the grace starts over");
        tokio::time::sleep(OUTPACED_AFTER / 2).await;
        assert!(futures::poll!(slow.as_mut()).is_ready());
    }
}
