//! The plugins a running host has loaded: added from files in a directory
//! (`<state>/plugins/<name>.rhai`) or by the host (`POST /admin/plugins`), replaced by adding
//! the same name again, removed by deleting the file or `DELETE /admin/plugins/<name>`.
//!
//! The first time a name is added, a factory for it is registered in the [`Registry`]; it
//! builds the plugin's current script into a strategy, so a pipeline swapped in afterwards
//! can name it; a removal takes the name out of the registry again, so a later swap naming
//! it is refused. A turn builds its strategies once, so a replacement never changes a turn
//! already running; a pipeline built before a removal falls back to the built-in (with a
//! warning) on its later turns instead of failing them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use foldwire_core::{BuildError, Component, ComponentKind, Params, Registry};
use serde::{Deserialize, Serialize};

use super::strategies::{
    ARRANGE, CHOOSE, Plugged, SUMMARIZE, ScriptFold, ScriptLayout, ScriptSummarizer,
};
use super::{Limits, Script};
use crate::fallback::{self, FallbackSpec};

/// File extension of plugin files.
pub const EXTENSION: &str = "rhai";

/// The owner shown for plugins in registry listings.
pub const OWNER: &str = "plugin (rhai)";

/// Why a plugin was not added or removed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The name does not say which kind of strategy it is.
    #[error(
        "plugin name {0:?} must be `fold.<name>`, `layout.<name>` or `summarizer.<name>` (lowercase letters, digits, `_`; dots between parts)"
    )]
    BadName(String),
    /// A built-in (or host) component already has the name.
    #[error("{name:?} is already registered by {owner}; choose another plugin name")]
    Taken {
        /// The name.
        name: String,
        /// Who registered it.
        owner: String,
    },
    /// The script does not compile or lacks its entry point.
    #[error("plugin {name:?} {message}")]
    Script {
        /// The name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// No plugin by that name is loaded.
    #[error("no plugin named {name:?} is loaded; loaded: {loaded}")]
    NotFound {
        /// The name.
        name: String,
        /// The loaded names.
        loaded: String,
    },
    /// The plugin directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The registry refused the name.
    #[error(transparent)]
    Registry(#[from] foldwire_core::RegistryError),
}

/// A loaded plugin as listings show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    /// The strategy name.
    pub name: String,
    /// The kind of strategy.
    pub kind: ComponentKind,
    /// The size of its script, in bytes.
    pub bytes: usize,
    /// 1 when first added, one more at each replacement.
    pub revision: u64,
    /// When this revision was loaded (seconds since the Unix epoch).
    pub loaded_at: u64,
    /// Its file, when it is kept in the plugin directory.
    pub file: Option<PathBuf>,
    /// One line saying what it does: the script's leading `//` comment, else a line naming
    /// its file (see [`description_of`]).
    #[serde(default)]
    pub description: String,
}

/// The one line listings show for a plugin: the first paragraph of the `//` comment its
/// script starts with, else "sandboxed <kind> plugin <name>.rhai".
pub fn description_of(name: &str, kind: ComponentKind, source: &str) -> String {
    let mut words: Vec<&str> = Vec::new();
    for line in source.lines().map(str::trim) {
        let Some(comment) = line.strip_prefix("//") else {
            // Blank lines before the comment are skipped; code or a blank line after it ends it.
            if line.is_empty() && words.is_empty() {
                continue;
            }
            break;
        };
        let text = comment.trim_start_matches(['/', '!']).trim();
        if text.is_empty() {
            if words.is_empty() {
                continue;
            }
            break;
        }
        words.extend(text.split_whitespace());
    }
    if words.is_empty() {
        format!("sandboxed {} plugin {name}.{EXTENSION}", kind.as_str())
    } else {
        words.join(" ")
    }
}

struct Loaded {
    script: Arc<Script>,
    source: String,
    info: PluginInfo,
}

/// Params a plugin strategy takes in a pipeline spec.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PluginParams {
    fallback: Option<String>,
    fallback_params: Params,
    /// Handed to the script as `request.config`.
    config: serde_json::Value,
}

/// The loaded plugins.
pub struct PluginStore {
    limits: Limits,
    dir: Option<PathBuf>,
    loaded: RwLock<BTreeMap<String, Loaded>>,
    /// Names with a factory in the registry, leaked once each for `Strategy::name`.
    registered: Mutex<BTreeMap<String, &'static str>>,
    /// Serializes add, remove and directory scans, so a scan never races a write.
    ops: Mutex<()>,
}

impl std::fmt::Debug for PluginStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginStore")
            .field("dir", &self.dir)
            .field("plugins", &self.list().len())
            .finish()
    }
}

/// The kind and entry point a plugin name declares.
pub fn kind_of(name: &str) -> Result<(ComponentKind, &'static str), PluginError> {
    let bad = || PluginError::BadName(name.to_owned());
    let (prefix, rest) = name.split_once('.').ok_or_else(bad)?;
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if !rest.split('.').all(part_ok) {
        return Err(bad());
    }
    match prefix {
        "fold" => Ok((ComponentKind::FoldPolicy, CHOOSE)),
        "layout" => Ok((ComponentKind::Layout, ARRANGE)),
        "summarizer" => Ok((ComponentKind::Summarizer, SUMMARIZE)),
        _ => Err(bad()),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl PluginStore {
    /// A store whose plugins run under `limits`, kept in `dir` when there is one.
    pub fn new(limits: Limits, dir: Option<PathBuf>) -> Arc<Self> {
        Arc::new(PluginStore {
            limits,
            dir,
            loaded: RwLock::new(BTreeMap::new()),
            registered: Mutex::new(BTreeMap::new()),
            ops: Mutex::new(()),
        })
    }

    /// The plugin directory.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The script a plugin has now.
    pub fn script(&self, name: &str) -> Option<Arc<Script>> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.get(name).map(|l| l.script.clone())
    }

    /// Every loaded plugin, by name.
    pub fn list(&self) -> Vec<PluginInfo> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.values().map(|l| l.info.clone()).collect()
    }

    /// Adds (or replaces) a plugin and, when the store has a directory, writes its file. A
    /// script that does not compile changes nothing: the plugin it would replace stays.
    ///
    /// # Errors
    /// A bad or taken name, a script that does not compile or lacks its entry point, or a
    /// file that cannot be written.
    pub fn add(
        self: &Arc<Self>,
        registry: &Registry,
        name: &str,
        source: &str,
    ) -> Result<PluginInfo, PluginError> {
        let _serial = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let (kind, script) = self.compile(name, source)?;
        let file = match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{name}.{EXTENSION}"));
                write_atomically(dir, &path, source)?;
                Some(path)
            }
            None => None,
        };
        self.install(registry, name, kind, script, source, file)
    }

    /// Compiles a plugin for the kind its name declares.
    fn compile(&self, name: &str, source: &str) -> Result<(ComponentKind, Script), PluginError> {
        let (kind, entry) = kind_of(name)?;
        let script = Script::compile(name, source, entry, self.limits).map_err(|message| {
            PluginError::Script {
                name: name.to_owned(),
                message,
            }
        })?;
        Ok((kind, script))
    }

    /// Makes a compiled plugin the one its name builds from.
    fn install(
        self: &Arc<Self>,
        registry: &Registry,
        name: &str,
        kind: ComponentKind,
        script: Script,
        source: &str,
        file: Option<PathBuf>,
    ) -> Result<PluginInfo, PluginError> {
        self.register(registry, name, kind)?;
        let description = description_of(name, kind, source);
        registry.describe(
            name,
            description.clone(),
            serde_json::to_value(PluginParams::default()).unwrap_or_default(),
        );
        let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        let revision = loaded.get(name).map_or(1, |l| l.info.revision + 1);
        let info = PluginInfo {
            name: name.to_owned(),
            kind,
            bytes: source.len(),
            revision,
            loaded_at: now(),
            file,
            description,
        };
        loaded.insert(
            name.to_owned(),
            Loaded {
                script: Arc::new(script),
                source: source.to_owned(),
                info: info.clone(),
            },
        );
        Ok(info)
    }

    /// Registers the factory of a name once.
    fn register(
        self: &Arc<Self>,
        registry: &Registry,
        name: &str,
        kind: ComponentKind,
    ) -> Result<(), PluginError> {
        let mut registered = self.registered.lock().unwrap_or_else(|p| p.into_inner());
        let ours = registered.get(name).copied();
        if ours.is_some() && registry.kind_of(name).is_some() {
            return Ok(());
        }
        if let Some(existing) = registry.list().into_iter().find(|c| c.name == name) {
            return Err(PluginError::Taken {
                name: name.to_owned(),
                owner: existing.crate_name,
            });
        }
        // A name added again after its removal reuses the string leaked the first time.
        let leaked: &'static str =
            ours.unwrap_or_else(|| Box::leak(name.to_owned().into_boxed_str()));
        let store = Arc::clone(self);
        registry.register(kind, name, OWNER, move |params: &Params| {
            store.build(leaked, kind, params)
        })?;
        registered.insert(name.to_owned(), leaked);
        Ok(())
    }

    /// Builds a plugin's strategy from its current script (or its fallback alone, warning
    /// at every call, once the plugin is removed).
    fn build(
        &self,
        name: &'static str,
        kind: ComponentKind,
        params: &Params,
    ) -> Result<Component, BuildError> {
        let p: PluginParams = BuildError::parse_params(name, params)?;
        let spec = FallbackSpec {
            fallback: p.fallback,
            fallback_params: p.fallback_params,
        };
        let plugged = Plugged {
            name,
            script: self.script(name),
            config: p.config,
        };
        Ok(match kind {
            ComponentKind::FoldPolicy => Component::FoldPolicy(Arc::new(ScriptFold {
                plugged,
                fallback: fallback::fold_policy(name, &spec)?,
            })),
            ComponentKind::Layout => Component::Layout(Arc::new(ScriptLayout {
                plugged,
                fallback: fallback::layout(name, &spec)?,
            })),
            ComponentKind::Summarizer => Component::Summarizer(Arc::new(ScriptSummarizer {
                plugged,
                fallback: fallback::summarizer(name, &spec)?,
            })),
            // Stages, and kinds added to the API later, are not something a script provides.
            _ => {
                return Err(BuildError::new(
                    name,
                    "a plugin provides a fold policy, a layout or a summarizer",
                ));
            }
        })
    }

    /// Removes a plugin and its file, and its name from `registry`: a pipeline swapped in
    /// afterwards cannot name it, while pipelines built before fall back (with a warning)
    /// on their later turns, and a turn already running keeps the revision it built.
    ///
    /// # Errors
    /// No such plugin, or a file that cannot be deleted.
    pub fn remove(&self, registry: &Registry, name: &str) -> Result<PluginInfo, PluginError> {
        let _serial = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        self.remove_locked(registry, name)
    }

    fn remove_locked(&self, registry: &Registry, name: &str) -> Result<PluginInfo, PluginError> {
        let removed = {
            let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
            let removed = loaded.remove(name);
            match removed {
                Some(l) => l.info,
                None => {
                    return Err(PluginError::NotFound {
                        name: name.to_owned(),
                        loaded: loaded.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        };
        // Registered by this store (never a linked name: adding one is refused as taken).
        if self
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
        {
            registry.unregister(name)?;
        }
        if let Some(path) = &removed.file {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(PluginError::Io {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(removed)
    }

    /// Brings the loaded plugins in line with the directory: new or changed files are
    /// (re)loaded, plugins whose file is gone are removed. Returns what could not be loaded.
    pub fn sync_dir(self: &Arc<Self>, registry: &Registry) -> Vec<PluginError> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let _serial = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let mut problems = Vec::new();
        let mut on_disk = BTreeMap::new();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
                        continue;
                    }
                    let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
                        continue;
                    };
                    match std::fs::read_to_string(&path) {
                        Ok(source) => {
                            on_disk.insert(name.to_owned(), (path.clone(), source));
                        }
                        Err(source) => problems.push(PluginError::Io { path, source }),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => problems.push(PluginError::Io {
                path: dir.clone(),
                source,
            }),
        }
        for (name, (path, source)) in &on_disk {
            let same = {
                let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
                loaded.get(name).is_some_and(|l| &l.source == source)
            };
            if same {
                continue;
            }
            let installed = self.compile(name, source).and_then(|(kind, script)| {
                self.install(registry, name, kind, script, source, Some(path.clone()))
            });
            if let Err(e) = installed {
                problems.push(e);
            }
        }
        let gone: Vec<String> = {
            let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
            loaded
                .values()
                .filter(|l| l.info.file.is_some() && !on_disk.contains_key(&l.info.name))
                .map(|l| l.info.name.clone())
                .collect()
        };
        for name in gone {
            if let Err(e) = self.remove_locked(registry, &name) {
                problems.push(e);
            }
        }
        problems
    }
}

/// Writes a file whole or not at all, so a scan never reads half a plugin.
fn write_atomically(dir: &Path, path: &Path, text: &str) -> Result<(), PluginError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| PluginError::Io { path: p, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("plugin")
    ));
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}
