//! Choosing a backend by URL.
//!
//! | location                      | backend                                            |
//! |-------------------------------|----------------------------------------------------|
//! | `file:///abs/dir`, `file://rel/dir` | local directory (created if missing)         |
//! | a bare path (`/x`, `./x`, `x`) | the same as `file://`                             |
//! | `memory://`                   | a fresh in-process store (nothing survives the process) |
//! | `s3://bucket[/prefix][?k=v&…]` | S3 or any S3-compatible server                    |
//!
//! S3 settings come from the usual `AWS_*` environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL` /
//! `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …). Query parameters override them; any key object_store's
//! `AmazonS3ConfigKey` knows is accepted, with or without the `aws_` prefix, e.g.
//! `s3://bucket/prefix?endpoint=http://127.0.0.1:5055&allow_http=true&region=us-east-1`.
//! Conditional puts use `If-Match` / `If-None-Match` (`S3ConditionalPut::ETagMatch`), which
//! session-state writes rely on; do not override `conditional_put`.

use std::path::PathBuf;
use std::str::FromStr;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};

use crate::error::ArchiveError;

/// Where an archive lives, parsed from a URL or path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveLocation {
    /// A local directory.
    Local(PathBuf),
    /// A fresh in-memory store.
    Memory,
    /// An S3 bucket, an optional key prefix and explicit settings from the query.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix inside the bucket (empty for the bucket root).
        prefix: String,
        /// Settings from the query string, as `(key, value)`.
        settings: Vec<(String, String)>,
    },
}

/// The default archive location: `<user data dir>/foldwire` (e.g. `~/.local/share/foldwire`).
pub fn default_location() -> Result<ArchiveLocation, ArchiveError> {
    dirs::data_dir()
        .map(|d| ArchiveLocation::Local(d.join("foldwire")))
        .ok_or(ArchiveError::NoDataDir)
}

fn bad(url: &str, why: impl Into<String>) -> ArchiveError {
    ArchiveError::BadUrl {
        url: url.to_owned(),
        why: why.into(),
    }
}

impl ArchiveLocation {
    /// Parses a location: `file://DIR`, a bare path, `memory://` or `s3://bucket/prefix?…`.
    pub fn parse(given: &str) -> Result<Self, ArchiveError> {
        let trimmed = given.trim();
        if trimmed.is_empty() {
            return Err(bad(given, "empty location"));
        }
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            return Ok(ArchiveLocation::Local(PathBuf::from(trimmed)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                if rest.is_empty() {
                    return Err(bad(given, "file:// needs a directory"));
                }
                // `file:///abs` keeps its leading slash; `file://rel` is relative to the cwd;
                // `file://localhost/abs` names the local host, as RFC 8089 allows.
                let path = rest.strip_prefix("localhost/").map_or(rest, |p| {
                    rest.get(rest.len() - p.len() - 1..).unwrap_or(rest)
                });
                Ok(ArchiveLocation::Local(PathBuf::from(path)))
            }
            "memory" => {
                if !rest.trim_matches('/').is_empty() {
                    return Err(bad(given, "memory:// takes no path"));
                }
                Ok(ArchiveLocation::Memory)
            }
            "s3" => Self::parse_s3(given, trimmed),
            other => Err(bad(given, format!("unknown scheme {other:?}"))),
        }
    }

    fn parse_s3(given: &str, trimmed: &str) -> Result<Self, ArchiveError> {
        // Checked on the raw text: URL parsing would silently resolve `..` segments.
        let raw_path = trimmed.split(['?', '#']).next().unwrap_or_default();
        if raw_path.split('/').skip(3).any(|s| s == "." || s == "..") {
            return Err(bad(
                given,
                "the key prefix may not contain '.' or '..' segments",
            ));
        }
        let parsed = url::Url::parse(trimmed).map_err(|e| bad(given, e.to_string()))?;
        let bucket = parsed
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| bad(given, "s3:// needs a bucket: s3://BUCKET/PREFIX"))?
            .to_owned();
        let prefix = parsed.path().trim_matches('/').to_owned();
        let mut settings = Vec::new();
        for (k, v) in parsed.query_pairs() {
            let key = k.to_ascii_lowercase();
            if key.contains("conditional_put") {
                return Err(bad(
                    given,
                    "conditional_put cannot be overridden: state writes rely on ETag preconditions",
                ));
            }
            let known = AmazonS3ConfigKey::from_str(&key)
                .or_else(|_| AmazonS3ConfigKey::from_str(&format!("aws_{key}")));
            if known.is_err() {
                return Err(bad(given, format!("unknown S3 setting {key:?}")));
            }
            settings.push((key, v.into_owned()));
        }
        Ok(ArchiveLocation::S3 {
            bucket,
            prefix,
            settings,
        })
    }
}

/// Builds the S3 store for a parsed location: environment first, then the query settings.
pub(crate) fn s3_builder(
    url: &str,
    bucket: &str,
    settings: &[(String, String)],
) -> Result<AmazonS3Builder, ArchiveError> {
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch);
    for (k, v) in settings {
        let key = AmazonS3ConfigKey::from_str(k)
            .or_else(|_| AmazonS3ConfigKey::from_str(&format!("aws_{k}")))
            .map_err(|source| ArchiveError::Backend {
                backend: "s3",
                url: url.to_owned(),
                source,
            })?;
        builder = builder.with_config(key, v);
    }
    if builder
        .get_config_value(&AmazonS3ConfigKey::Client(
            object_store::ClientConfigKey::AllowHttp,
        ))
        .is_some_and(|v| v == "true")
    {
        tracing::warn!(%url, "S3 archive allows plain HTTP; use it only for local test servers.");
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!(
            ArchiveLocation::parse("file:///tmp/x").unwrap(),
            ArchiveLocation::Local("/tmp/x".into())
        );
        assert_eq!(
            ArchiveLocation::parse("file://localhost/tmp/x").unwrap(),
            ArchiveLocation::Local("/tmp/x".into())
        );
        assert_eq!(
            ArchiveLocation::parse("./rel/dir").unwrap(),
            ArchiveLocation::Local("./rel/dir".into())
        );
        assert_eq!(
            ArchiveLocation::parse("memory://").unwrap(),
            ArchiveLocation::Memory
        );
        let s3 = ArchiveLocation::parse(
            "s3://bkt/some/prefix?endpoint=http://127.0.0.1:5055&allow_http=true",
        )
        .unwrap();
        assert_eq!(
            s3,
            ArchiveLocation::S3 {
                bucket: "bkt".into(),
                prefix: "some/prefix".into(),
                settings: vec![
                    ("endpoint".into(), "http://127.0.0.1:5055".into()),
                    ("allow_http".into(), "true".into()),
                ],
            }
        );
    }

    #[test]
    fn the_default_is_the_user_data_dir() {
        if let Some(data) = dirs::data_dir() {
            assert_eq!(
                default_location().unwrap(),
                ArchiveLocation::Local(data.join("foldwire"))
            );
        }
    }

    #[test]
    fn bad_locations_name_the_problem() {
        for (url, needle) in [
            ("", "empty"),
            ("ftp://x", "unknown scheme"),
            ("memory://foo", "no path"),
            ("s3:///prefix", "bucket"),
            ("s3://b/p?colour=blue", "colour"),
            ("s3://b/p?conditional_put=disabled", "conditional_put"),
            ("s3://b/a/../c", ".."),
        ] {
            let err = ArchiveLocation::parse(url).unwrap_err().to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
    }
}
