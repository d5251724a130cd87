//! The conformance suite every backend runs (local directory, memory, S3): async checks
//! over [`Backends`] that return what failed instead of panicking, so hosts can run them
//! against their own stores too.
//!
//! Each check takes a `tag` that makes its session ids unique, so runs against a shared
//! bucket never see each other's objects.

use std::collections::BTreeMap;

use bytes::Bytes;

use foldwire_core::{Ref, SessionId, SessionState, StateVersion, StoreError};

use crate::Backends;
use crate::keys;

/// A conformance check that failed.
#[derive(Debug, thiserror::Error)]
#[error("conformance check {check} failed on the {backend} backend: {detail}")]
pub struct ConformanceError {
    /// The check.
    pub check: &'static str,
    /// The backend.
    pub backend: &'static str,
    /// What was observed.
    pub detail: String,
}

/// Result of a conformance check.
pub type Checked<T = ()> = Result<T, ConformanceError>;

struct Ctx<'a> {
    check: &'static str,
    b: &'a Backends,
}

impl Ctx<'_> {
    fn fail(&self, detail: impl Into<String>) -> ConformanceError {
        ConformanceError {
            check: self.check,
            backend: self.b.backend,
            detail: detail.into(),
        }
    }

    fn ensure(&self, ok: bool, detail: impl FnOnce() -> String) -> Checked {
        if ok { Ok(()) } else { Err(self.fail(detail())) }
    }

    fn ok<T, E: std::fmt::Display>(&self, what: &str, r: Result<T, E>) -> Checked<T> {
        r.map_err(|e| self.fail(format!("{what}: {e}")))
    }

    fn session(&self, id: String) -> Checked<SessionId> {
        SessionId::new(id).map_err(|e| self.fail(format!("test session id: {e}")))
    }
}

/// Content-addressed writes: key = SHA-256, duplicates harmless, bytes come back exactly;
/// a ref's pointer names its newest payload; `list` reports refs, types and sizes.
pub async fn media_round_trip(b: &Backends, tag: &str) -> Checked {
    let cx = Ctx {
        check: "media_round_trip",
        b,
    };
    let s = cx.session(format!("{tag}-media"))?;
    let first = Bytes::from_static(b"\x89PNG\r\n\x1a\n first image bytes \x00\xff");
    let stored = cx.ok(
        "put_content",
        b.media.put_content(&s, "image/png", first.clone()).await,
    )?;
    cx.ensure(stored.key == keys::sha256_hex(&first), || {
        format!("key {} is not the SHA-256 of the bytes", stored.key)
    })?;
    cx.ensure(stored.size == first.len() as u64, || {
        format!("size {} != {}", stored.size, first.len())
    })?;
    let again = cx.ok(
        "duplicate put_content",
        b.media.put_content(&s, "image/png", first.clone()).await,
    )?;
    cx.ensure(again == stored, || format!("duplicate put gave {again:?}"))?;
    let back = cx.ok("get_content", b.media.get_content(&s, &stored.key).await)?;
    cx.ensure(back == first, || "get_content bytes differ".to_owned())?;

    let second = Bytes::from_static(b"GIF89a second");
    let r = Ref(1);
    cx.ok(
        "put ref",
        b.media.put(&s, r, "image/png", first.clone()).await,
    )?;
    let obj = cx.ok(
        "put ref again",
        b.media.put(&s, r, "image/gif", second.clone()).await,
    )?;
    let (got, bytes) = cx.ok("get ref", b.media.get(&s, r).await)?;
    cx.ensure(
        bytes == second && got == obj && got.media_type == "image/gif",
        || format!("get(ref) returned {got:?}, not the newest payload"),
    )?;
    let listed = cx.ok("list", b.media.list(&s).await)?;
    cx.ensure(listed == vec![obj.clone()], || {
        format!("list returned {listed:?}")
    })?;
    Ok(())
}

/// One session cannot reach another's objects through any call.
pub async fn sessions_are_isolated(b: &Backends, tag: &str) -> Checked {
    let cx = Ctx {
        check: "sessions_are_isolated",
        b,
    };
    let a = cx.session(format!("{tag}-iso-a"))?;
    let other = cx.session(format!("{tag}-iso-b"))?;
    let bytes = Bytes::from_static(b"secret of session a");
    let stored = cx.ok(
        "put in a",
        b.media.put(&a, Ref(7), "image/png", bytes).await,
    )?;
    let by_key = b.media.get_content(&other, &stored.key).await;
    cx.ensure(matches!(by_key, Err(StoreError::NotFound { .. })), || {
        format!("b read a's key: {by_key:?}")
    })?;
    let by_ref = b.media.get(&other, Ref(7)).await;
    cx.ensure(matches!(by_ref, Err(StoreError::NotFound { .. })), || {
        format!("b read a's ref: {by_ref:?}")
    })?;
    let listed = cx.ok("list b", b.media.list(&other).await)?;
    cx.ensure(listed.is_empty(), || {
        format!("b lists a's objects: {listed:?}")
    })?;
    let state = b.state.load(&other).await;
    cx.ensure(matches!(state, Ok(None)), || {
        format!("b sees a state: {state:?}")
    })?;
    Ok(())
}

/// Keys that could leave the session's prefix are refused before any I/O.
pub async fn hostile_keys_are_refused(b: &Backends, tag: &str) -> Checked {
    let cx = Ctx {
        check: "hostile_keys_are_refused",
        b,
    };
    let s = cx.session(format!("{tag}-hostile"))?;
    let long = "a".repeat(4096);
    for key in [
        "../../etc/passwd",
        "/etc/passwd",
        "..",
        "a\0b",
        "sessions/other/media/x",
        long.as_str(),
    ] {
        let got = b.media.get_content(&s, key).await;
        cx.ensure(matches!(got, Err(StoreError::InvalidKey { .. })), || {
            format!(
                "key {:?} gave {got:?}",
                key.chars().take(40).collect::<String>()
            )
        })?;
    }
    Ok(())
}

/// Load/save round trip with conditional writes: create-if-absent, update-if-unchanged.
pub async fn state_round_trip(b: &Backends, tag: &str) -> Checked {
    let cx = Ctx {
        check: "state_round_trip",
        b,
    };
    let s = cx.session(format!("{tag}-state"))?;
    let none = cx.ok("load new", b.state.load(&s).await)?;
    cx.ensure(none.is_none(), || format!("new session had state {none:?}"))?;
    let mut state = SessionState::new(s.clone());
    state.turns = 1;
    state.extra.insert(
        "from_the_future".to_owned(),
        serde_json::json!({"kept": [1, 2]}),
    );
    let v1 = cx.ok("create", b.state.save(&s, &state, None).await)?;
    let loaded = cx.ok("load", b.state.load(&s).await)?;
    cx.ensure(
        loaded.as_ref().map(|(st, v)| (st, v)) == Some((&state, &v1)),
        || format!("loaded {loaded:?}"),
    )?;
    let dup = b.state.save(&s, &state, None).await;
    cx.ensure(matches!(dup, Err(StoreError::Conflict { .. })), || {
        format!("second create gave {dup:?}")
    })?;
    state.turns = 2;
    let v2 = cx.ok("update", b.state.save(&s, &state, Some(&v1)).await)?;
    cx.ensure(v2 != v1, || "update kept the version".to_owned())?;
    state.turns = 3;
    let stale = b.state.save(&s, &state, Some(&v1)).await;
    cx.ensure(matches!(stale, Err(StoreError::Conflict { .. })), || {
        format!("stale update gave {stale:?}")
    })?;
    let bogus = b
        .state
        .save(&s, &state, Some(&StateVersion("not-a-version".to_owned())))
        .await;
    cx.ensure(bogus.is_err(), || {
        "a made-up version was accepted".to_owned()
    })?;
    let (last, _) = cx
        .ok("reload", b.state.load(&s).await)?
        .ok_or_else(|| cx.fail("state vanished"))?;
    cx.ensure(last.turns == 2, || {
        format!("turns {} after a stale write", last.turns)
    })?;
    cx.ensure(
        last.extra.get("from_the_future") == Some(&serde_json::json!({"kept": [1, 2]})),
        || "unknown fields were lost".to_owned(),
    )?;
    Ok(())
}

/// Several writers increment one counter of one session with load → modify → conditional
/// save, retrying on conflict; no increment may be lost. `b` is the store checked;
/// `replicas` are further handles on the same location (separate proxy replicas), each
/// running its own writers. Returns the conflicts seen (proof that the writers contended).
pub async fn concurrent_writers(
    b: &Backends,
    replicas: &[&Backends],
    tag: &str,
    writers: usize,
    increments: u64,
) -> Checked<u64> {
    let cx = Ctx {
        check: "concurrent_writers",
        b,
    };
    let s = cx.session(format!("{tag}-writers"))?;
    let handles: Vec<_> = std::iter::once(b).chain(replicas.iter().copied()).collect();
    let mut tasks = Vec::with_capacity(writers * handles.len());
    for handle in &handles {
        for _ in 0..writers {
            let store = std::sync::Arc::clone(&handle.state);
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut conflicts = 0u64;
                for _ in 0..increments {
                    loop {
                        let (mut state, version) = match store.load(&s).await? {
                            Some((st, v)) => (st, Some(v)),
                            None => (SessionState::new(s.clone()), None),
                        };
                        *state.counters.entry("hits".to_owned()).or_default() += 1;
                        match store.save(&s, &state, version.as_ref()).await {
                            Ok(_) => break,
                            Err(StoreError::Conflict { .. }) => conflicts += 1,
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok::<u64, StoreError>(conflicts)
            }));
        }
    }
    let mut conflicts = 0;
    for task in tasks {
        conflicts += cx.ok("writer", cx.ok("join writer", task.await)?)?;
    }
    let (state, _) = cx
        .ok("final load", b.state.load(&s).await)?
        .ok_or_else(|| cx.fail("no state after the writers"))?;
    let total = (writers * handles.len()) as u64 * increments;
    let hits = state.counters.get("hits").copied().unwrap_or(0);
    cx.ensure(hits == total, || {
        format!("counter is {hits}, expected {total}: updates were lost")
    })?;
    Ok(conflicts)
}

/// Retention removes what nothing points to and sessions idle too long, never an object a
/// live state or ref pointer names; a dry run removes nothing. Run it last: its second pass
/// removes every session of the store (they are all "idle" 100 days on).
pub async fn retention(b: &Backends, tag: &str) -> Checked {
    use crate::retention::{RetentionPolicy, collect};
    use std::time::{Duration, SystemTime};
    let cx = Ctx {
        check: "retention",
        b,
    };
    let live = cx.session(format!("{tag}-retention"))?;
    let png = "image/png";
    let kept = cx.ok(
        "put_content",
        b.media
            .put_content(
                &live,
                png,
                Bytes::from_static(b"named by the state's archive index"),
            )
            .await,
    )?;
    let pointed = Ref(7);
    cx.ok(
        "put",
        b.media
            .put(
                &live,
                pointed,
                png,
                Bytes::from_static(b"named by a ref pointer"),
            )
            .await,
    )?;
    let orphan = cx.ok(
        "put_content",
        b.media
            .put_content(
                &live,
                png,
                Bytes::from_static(b"spilled by a turn that failed open"),
            )
            .await,
    )?;
    let mut state = SessionState::new(live.clone());
    state.archive.push(foldwire_core::state::ArchivedItem {
        r#ref: None,
        key: kept.key.clone(),
        media_type: png.to_owned(),
        size: kept.size,
        ..Default::default()
    });
    cx.ok("save", b.state.save(&live, &state, None).await)?;

    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let policy = RetentionPolicy::from_days(60, 7);
    let collect_at =
        |days: u32, dry_run: bool| collect(&b.store, b.backend, policy, now + day * days, dry_run);
    let dry = cx.ok("dry run", collect_at(30, true).await)?;
    cx.ensure(
        dry.orphans_removed >= 1 && dry.sessions_removed.is_empty(),
        || format!("a dry run 30 days on should find the orphan and no idle session: {dry:?}"),
    )?;
    cx.ok(
        "orphan after a dry run",
        b.media.get_content(&live, &orphan.key).await,
    )?;

    let month = cx.ok("collect 30 days on", collect_at(30, false).await)?;
    cx.ensure(
        month.orphans_removed >= 1 && month.kept_referenced >= 2,
        || format!("30 days on: {month:?}"),
    )?;
    cx.ensure(
        matches!(
            b.media.get_content(&live, &orphan.key).await,
            Err(StoreError::NotFound { .. })
        ),
        || "the unreferenced payload is still there".to_owned(),
    )?;
    cx.ok(
        "payload named by the state",
        b.media.get_content(&live, &kept.key).await,
    )?;
    cx.ok("payload named by a ref", b.media.get(&live, pointed).await)?;
    cx.ok("state", b.state.load(&live).await)?
        .ok_or_else(|| cx.fail("the live session's state was removed"))?;

    let later = cx.ok("collect 100 days on", collect_at(100, false).await)?;
    cx.ensure(
        later.sessions_removed.iter().any(|s| s == live.as_str()) && later.bytes_freed > 0,
        || format!("100 days on the idle session should be gone: {later:?}"),
    )?;
    cx.ensure(cx.ok("load", b.state.load(&live).await)?.is_none(), || {
        "an idle session's state survived".to_owned()
    })?;
    cx.ensure(b.media.get_content(&live, &kept.key).await.is_err(), || {
        "an idle session's media survived".to_owned()
    })?;
    Ok(())
}

/// Runs every check; returns the conflicts seen by the concurrent writers.
pub async fn run_all(b: &Backends, tag: &str) -> Checked<BTreeMap<&'static str, u64>> {
    media_round_trip(b, tag).await?;
    sessions_are_isolated(b, tag).await?;
    hostile_keys_are_refused(b, tag).await?;
    state_round_trip(b, tag).await?;
    let conflicts = concurrent_writers(b, &[], tag, 2, 25).await?;
    retention(b, tag).await?;
    Ok(BTreeMap::from([("conflicts", conflicts)]))
}
