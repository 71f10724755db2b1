//! Parking: the one way a stage sets a tenant's work aside so the other tenants go on — the relay's outbox
//! rows (`relay/outlet.rs`, table `relay_parked`) and a projection's events (`projection/plugin.rs`, table
//! `projection_parked`). The stage keeps what it parks in its table before the work it came in is
//! acknowledged, so nothing is lost; this is the schedule beside it: which tenants are parked (their later
//! work parks behind, so order holds) and when each is tried again — with a doubling backoff after a failed
//! try, started over after a good one. The table is the truth: the schedule is read from it again every
//! [`Pace::reload`] (what another process parked, or this one before a restart).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::backoff::Backoff;

/// Most characters of a parking reason kept in a stage's table.
const REASON_CHARS: usize = 1000;

/// A reason as the stage's table keeps it.
pub fn kept_reason(reason: &str) -> String {
    reason.chars().take(REASON_CHARS).collect()
}

/// How a stage tries its parked tenants again.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Whether a parked tenant's first try waits one `backoff` (a projection: a build, or a neighbour's
    /// spinning, may be over by then), or comes at once (the relay).
    pub wait_first: bool,
    /// The wait after a failed try, doubled after each next one up to `at_most`.
    pub backoff: Duration,
    pub at_most: Duration,
    /// How often the parked tenants are read from the table again.
    pub reload: Duration,
}

/// When a parked tenant is tried next, and how long after a failure of that try.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub at: Instant,
    backoff: Backoff,
}

impl Retry {
    /// Now, the backoff started over.
    fn now(mut self) -> Self {
        self.backoff.reset();
        Self { at: Instant::now(), backoff: self.backoff }
    }

    /// After `wait`, the backoff started over.
    pub fn after(self, wait: Duration) -> Self {
        Self { at: Instant::now() + wait, ..self.now() }
    }

    /// After the first wait, the backoff started over.
    pub fn soon(self) -> Self {
        self.now().after_failure()
    }

    /// The next try after a failed one.
    pub fn after_failure(mut self) -> Self {
        Self { at: Instant::now() + self.backoff.next_wait(), backoff: self.backoff }
    }

    /// How long until this try.
    pub fn wait(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
}

/// A stage's parked tenants, each with its next try.
pub struct Parking<K> {
    pace: Pace,
    tenants: Mutex<HashMap<K, Retry>>,
    /// When the parked tenants were last read from the table.
    loaded: Mutex<Option<Instant>>,
}

impl<K: Clone + Eq + Hash> Parking<K> {
    pub fn new(pace: Pace) -> Self {
        Self { pace, tenants: Mutex::default(), loaded: Mutex::default() }
    }

    /// A first try as this stage makes it after parking.
    fn first(&self) -> Retry {
        let now = Retry { at: Instant::now(), backoff: Backoff::new(self.pace.backoff, self.pace.at_most) };
        if self.pace.wait_first {
            now.after_failure()
        } else {
            now
        }
    }

    pub fn is_parked<Q: Eq + Hash + ?Sized>(&self, tenant: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.lock().contains_key(tenant)
    }

    /// Parks `tenant`, unless it is parked already (then its next try stays as it was).
    pub fn park(&self, tenant: K) {
        let first = self.first();
        self.lock().entry(tenant).or_insert(first);
    }

    /// Whether the table is to be read again now ([`Pace::reload`] since the last read, or none yet); the
    /// caller then parks each tenant it finds there and says [`Parking::reloaded`] (a failed read is tried
    /// again at the next call).
    pub fn reload_due(&self) -> bool {
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner).is_none_or(|at| at.elapsed() >= self.pace.reload)
    }

    /// The table was read and its tenants parked.
    pub fn reloaded(&self) {
        *self.loaded.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// The parked tenants due for a try, earliest first, of those `eligible` says.
    pub fn due(&self, eligible: impl Fn(&K) -> bool) -> Vec<(K, Retry)> {
        let now = Instant::now();
        let mut due: Vec<(K, Retry)> =
            self.lock().iter().filter(|(t, r)| r.at <= now && eligible(t)).map(|(t, r)| (t.clone(), *r)).collect();
        due.sort_by_key(|(_, r)| r.at);
        due
    }

    /// `tenant`'s next try (it stays parked).
    pub fn next_try(&self, tenant: K, retry: Retry) {
        self.lock().insert(tenant, retry);
    }

    /// `tenant`'s next try after a failed one, if it is parked; how long until then.
    pub fn failed(&self, tenant: &K) -> Option<Duration> {
        self.lock().get_mut(tenant).map(|retry| {
            *retry = retry.after_failure();
            retry.wait()
        })
    }

    /// Tries `tenant` again at once if it is parked (its last try went well), the backoff started over.
    pub fn retry_now(&self, tenant: &K) {
        if let Some(retry) = self.lock().get_mut(tenant) {
            *retry = retry.now();
        }
    }

    /// Tries `tenant` at once if it is parked (what it waited for has ended), its backoff kept.
    pub fn hurry(&self, tenant: &K) {
        if let Some(retry) = self.lock().get_mut(tenant) {
            retry.at = Instant::now();
        }
    }

    /// `tenant` has nothing parked any more: it goes back to the live path.
    pub fn drained(&self, tenant: &K) {
        self.lock().remove(tenant);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Retry>> {
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACE: Pace = Pace {
        wait_first: true,
        backoff: Duration::from_secs(2),
        at_most: Duration::from_secs(5),
        reload: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn a_parked_tenant_waits_its_first_try_then_doubles_after_failures_up_to_the_ceiling() {
        let parking = Parking::new(PACE);
        parking.park("acme");
        assert!(parking.is_parked(&"acme"));
        assert!(parking.due(|_| true).is_empty(), "the first try waits the first backoff");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(parking.due(|_| true).len(), 1);
        assert!(parking.due(|t| *t != "acme").is_empty(), "only the eligible");
        let waits: Vec<Duration> = (0..4).map(|_| parking.failed(&"acme").unwrap()).collect();
        assert_eq!(waits, [4, 5, 5, 5].map(Duration::from_secs));
        parking.hurry(&"acme");
        let (_, retry) = parking.due(|_| true).remove(0);
        assert_eq!(retry.after_failure().wait(), Duration::from_secs(5), "hurrying keeps the backoff");
        assert_eq!(retry.soon().wait(), Duration::from_secs(2), "a good try starts it over");
        parking.drained(&"acme");
        assert!(!parking.is_parked(&"acme") && parking.failed(&"acme").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn parking_again_keeps_the_next_try_and_the_table_is_read_again_each_reload() {
        let parking = Parking::new(PACE);
        parking.park("acme");
        parking.failed(&"acme");
        let before = parking.lock()[&"acme"].at;
        parking.park("acme");
        assert_eq!(parking.lock()[&"acme"].at, before);
        assert!(parking.reload_due() && parking.reload_due(), "due until a read succeeds");
        parking.reloaded();
        assert!(!parking.reload_due());
        tokio::time::advance(PACE.reload).await;
        assert!(parking.reload_due());
        let at_once = Parking::new(Pace { wait_first: false, ..PACE });
        at_once.park("acme");
        assert_eq!(at_once.due(|_| true).len(), 1, "the relay tries at once");
    }
}
