//! `foldwire restore`: a block's originals exactly as received, or archived media bytes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use foldwire_core::{BlockId, Ref};
use foldwire_stages::kernel;

use super::{SessionArgs, print_json, runtime, write_stdout};
use crate::offline::OfflineSession;

/// What `foldwire restore` is told.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The session and its state location.
    #[command(flatten)]
    pub session: SessionArgs,
    /// The block to restore.
    #[arg(
        long,
        conflicts_with = "image_ref",
        required_unless_present = "image_ref"
    )]
    pub block: Option<String>,
    /// With --block: also the units of the blocks it consumed.
    #[arg(long, requires = "block")]
    pub full: bool,
    /// With --block: print JSON (refs and units) instead of the exact units.
    #[arg(long, requires = "block")]
    pub json: bool,
    /// An archived media ref, or `list`; also (as `--ref`) a tool output `tool.trim`
    /// trimmed, printed exactly as the client sent it.
    #[arg(long, visible_alias = "ref")]
    pub image_ref: Option<String>,
    /// With --image-ref: write the bytes to this file.
    #[arg(short = 'o', long = "output", requires = "image_ref")]
    pub output: Option<PathBuf>,
}

impl RestoreArgs {
    /// What the flags ask to restore.
    ///
    /// # Errors
    /// Neither `--block` nor `--image-ref` (clap already refuses that; this keeps it total).
    pub fn target(&self) -> Result<RestoreTarget> {
        match (&self.block, &self.image_ref) {
            (Some(block), _) => Ok(RestoreTarget::Block {
                block: block.clone(),
                full: self.full,
                json: self.json,
            }),
            (None, Some(r#ref)) => Ok(RestoreTarget::Image {
                r#ref: r#ref.clone(),
                out: self.output.clone(),
            }),
            (None, None) => Err(anyhow!(
                "restore needs --block bN or --image-ref mNNNNN|list"
            )),
        }
    }
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
pub fn run(args: RestoreArgs) -> Result<ExitCode> {
    let target = args.target()?;
    let session = &args.session;
    runtime()?.block_on(async {
        let s = OfflineSession::open(&session.session, session.state.state.as_deref()).await?;
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
