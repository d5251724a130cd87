//! The recent turn reports the admin API shows: the last few per session, for a bounded
//! number of sessions, so a proxy that runs for months does not keep a report history for
//! every session it ever served.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use foldwire_core::{SessionId, TurnReport};

/// Recent reports per session, the least recently reported sessions dropped first.
#[derive(Debug)]
pub struct RecentReports {
    per_session: usize,
    max_sessions: usize,
    /// Orders sessions by their latest report.
    clock: AtomicU64,
    sessions: DashMap<SessionId, Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    last: u64,
    reports: VecDeque<TurnReport>,
}

impl RecentReports {
    /// Keeps `per_session` reports for each of at most `max_sessions` sessions.
    pub fn new(per_session: usize, max_sessions: usize) -> Self {
        RecentReports {
            per_session,
            max_sessions: max_sessions.max(1),
            clock: AtomicU64::new(0),
            sessions: DashMap::new(),
        }
    }

    /// Records a report; a session new past the limit pushes out the one reported least
    /// recently.
    pub fn remember(&self, session: &SessionId, report: TurnReport) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let is_new = {
            let mut entry = self.sessions.entry(session.clone()).or_default();
            let is_new = entry.reports.is_empty();
            entry.last = now;
            entry.reports.push_back(report);
            while entry.reports.len() > self.per_session {
                entry.reports.pop_front();
            }
            is_new
        };
        if is_new {
            while self.sessions.len() > self.max_sessions {
                let oldest = self
                    .sessions
                    .iter()
                    .min_by_key(|e| e.value().last)
                    .map(|e| e.key().clone());
                match oldest {
                    Some(id) => {
                        self.sessions.remove(&id);
                    }
                    None => break,
                }
            }
        }
    }

    /// A session's recent reports, oldest first.
    pub fn of(&self, session: &SessionId) -> Vec<TurnReport> {
        self.sessions
            .get(session)
            .map(|r| r.reports.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The sessions with reports kept.
    pub fn sessions(&self) -> Vec<SessionId> {
        self.sessions.iter().map(|e| e.key().clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(turn: u64) -> TurnReport {
        TurnReport {
            turn,
            ..TurnReport::default()
        }
    }

    #[test]
    fn reports_are_bounded_per_session_and_in_sessions() {
        let r = RecentReports::new(2, 3);
        let id = |n: u32| SessionId::new(format!("s{n}")).unwrap();
        for turn in 1..=3 {
            r.remember(&id(1), report(turn));
        }
        let turns: Vec<u64> = r.of(&id(1)).iter().map(|t| t.turn).collect();
        assert_eq!(turns, vec![2, 3]);
        r.remember(&id(2), report(1));
        r.remember(&id(3), report(1));
        // s1 reports again: s2 is now the least recently reported, and goes when s4 arrives.
        r.remember(&id(1), report(4));
        r.remember(&id(4), report(1));
        let mut kept = r.sessions();
        kept.sort();
        assert_eq!(kept, vec![id(1), id(3), id(4)]);
        assert!(r.of(&id(2)).is_empty());
    }
}
