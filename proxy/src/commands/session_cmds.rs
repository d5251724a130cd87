//! The session commands: `fold`, `restore`, `inspect`, `search`, `reset`. Each opens the
//! session at `--state`, works on its state offline, and prints JSON (or exact bytes).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use foldwire_core::{AnyRef, BlockId, Ref};
use foldwire_stages::kernel::{self, CompressConfig, CompressRequest, MinSummary, RangesConfig};
use foldwire_stages::layout_head_window;

use super::write_stdout;
use crate::session::OfflineSession;

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    write_stdout(s.as_bytes())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `foldwire fold`: folds one range of refs (or block ids) into a block with a summary.
/// Exit 1 when the range did not apply (the JSON says why).
///
/// # Errors
/// Unusable session or refs that do not parse.
pub fn fold(
    session: &str,
    state: Option<&str>,
    from: &str,
    to: &str,
    summary: &str,
    topic: Option<&str>,
) -> Result<ExitCode> {
    let start: AnyRef = from.parse().context("--from")?;
    let end: AnyRef = to.parse().context("--to")?;
    runtime()?.block_on(async {
        let mut s = OfflineSession::open(session, state).await?;
        let view = s.view().await?;
        let request = CompressRequest {
            start,
            end,
            summary: summary.to_owned(),
            topic: topic.map(str::to_owned),
            author: Some("cli".to_owned()),
        };
        let cx = s.cx();
        let result = kernel::apply_compression(
            &mut s.state,
            &view,
            std::slice::from_ref(&request),
            // A person's explicit fold: no minimum summary length (that rule is the model's).
            &CompressConfig {
                min_summary: MinSummary::OFF,
                ..CompressConfig::default()
            },
            cx.estimator.as_ref(),
        );
        if !result.blocks_created.is_empty() {
            // The originals go to the archive before the state is saved; any that cannot be
            // stored stay in the state (nothing is lost) and are named.
            let archived = kernel::archive_originals(
                &mut s.state,
                s.backends.media.as_ref(),
                &s.id,
                cx.archive_timeout,
            )
            .await;
            for (r, why) in &archived.failed {
                eprintln!("foldwire: the original of {r} stays in the session state: {why}");
            }
            s.save().await?;
        }
        print_json(&result)?;
        Ok(if result.blocks_created.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// What `foldwire restore` restores.
#[derive(Debug)]
pub enum RestoreTarget {
    /// A block's original messages.
    Block {
        /// The block.
        block: String,
        /// Include the units of consumed blocks.
        full: bool,
        /// Print the structured JSON instead of the exact units.
        json: bool,
    },
    /// Archived media by ref, or `list`.
    Image {
        /// `mNNNNN` or `list`.
        r#ref: String,
        /// Where to write the bytes (stdout when absent).
        out: Option<PathBuf>,
    },
}

/// `foldwire restore`: the originals of a block, exactly as received (one unit per line),
/// or archived media bytes byte-identical to what the client sent.
///
/// # Errors
/// Unknown block or ref, or an archive that lost the bytes.
pub fn restore(session: &str, state: Option<&str>, target: RestoreTarget) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let s = OfflineSession::open(session, state).await?;
        match target {
            RestoreTarget::Block { block, full, json } => {
                let id: BlockId = block.parse().context("--block")?;
                let restored = kernel::restore_with_archive(
                    &s.state,
                    s.backends.media.as_ref(),
                    &s.id,
                    id,
                    full,
                )
                .await?;
                if json {
                    print_json(&restored)?;
                } else {
                    let mut out = Vec::new();
                    for u in &restored.units {
                        out.extend_from_slice(u.raw.as_bytes());
                        out.push(b'\n');
                    }
                    write_stdout(&out)?;
                }
            }
            RestoreTarget::Image { r#ref, out } if r#ref == "list" => {
                if out.is_some() {
                    bail!("-o needs an image ref, not `list`");
                }
                print_json(&foldwire_archive::list_media(&s.state))?;
            }
            RestoreTarget::Image { r#ref, out } => {
                let r: Ref = r#ref.parse().context("--image-ref")?;
                if foldwire_stages::tool_trim::trimmed_key(&s.state, r).is_some() {
                    let raw = foldwire_stages::tool_trim::restore_trimmed(
                        &s.state,
                        s.backends.media.as_ref(),
                        &s.id,
                        r,
                    )
                    .await?;
                    match out {
                        Some(path) => std::fs::write(&path, raw.as_bytes())
                            .with_context(|| format!("writing {}", path.display()))?,
                        None => write_stdout(raw.as_bytes())?,
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                let media =
                    foldwire_archive::restore_media(s.backends.media.as_ref(), &s.state, &s.id, r)
                        .await?;
                match out {
                    Some(path) => {
                        let mut f = std::fs::File::create(&path)
                            .with_context(|| format!("creating {}", path.display()))?;
                        f.write_all(&media.bytes)?;
                        eprintln!(
                            "{} bytes of {} written to {}",
                            media.bytes.len(),
                            media.media_type,
                            path.display()
                        );
                    }
                    None => write_stdout(&media.bytes)?,
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `foldwire inspect`: refs, blocks and the current compressible ranges, as JSON.
///
/// # Errors
/// Unusable session.
pub fn inspect(session: &str, state: Option<&str>) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let s = OfflineSession::open(session, state).await?;
        // A session with no recorded request still has refs and blocks to show.
        let view = match s.recorded_view().await? {
            Some(view) => view,
            None => {
                eprintln!(
                    "foldwire: session {} has no recorded request; refs and blocks come from its state alone (no roles, previews or ranges)",
                    s.id
                );
                crate::session::empty_view(foldwire_core::Wire::Anthropic)
            }
        };
        let cx = s.cx();
        print_json(&kernel::inspect(
            &s.state,
            &view,
            &RangesConfig::default(),
            cx.estimator.as_ref(),
        ))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `foldwire search`: blocks ranked by how well their summary and topic match.
///
/// # Errors
/// Unusable session.
pub fn search(session: &str, state: Option<&str>, query: &str) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let s = OfflineSession::open(session, state).await?;
        print_json(&kernel::search(&s.state, query))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `foldwire reset`: starts a new head at a transition message on the session's next turn.
///
/// # Errors
/// Unusable session or an empty transition.
pub fn reset(session: &str, state: Option<&str>, transition: &str) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let mut s = OfflineSession::open(session, state).await?;
        let generation =
            layout_head_window::reset(&mut s.state, transition).map_err(|e| anyhow!("{e}"))?;
        s.save().await?;
        print_json(&serde_json::json!({ "session": s.id, "reset_generation": generation }))?;
        Ok(ExitCode::SUCCESS)
    })
}
