//! ZoneSource: where this broker's zone comes from. A fixed name (`zone`), or a file re-read
//! while the broker runs (`zone-file`): on Kubernetes the node a pod lands on, and so its
//! zone, is known only after the pod exists, and the operator passes it in through a
//! downward-API file that changes once the pod is scheduled. The zone is registered with the
//! name servers (`__ZONE_NAME`) and told to the master, for same-zone reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use conveyor_protocol::route::normalize_zone as normalize;

/// Where the zone is read from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneSource {
    /// `zone`: a fixed zone name.
    pub fixed: Option<String>,
    /// `zone-file`: a file holding the zone name; when it exists and is not empty, it wins
    /// over `fixed`.
    pub file: Option<PathBuf>,
}

impl ZoneSource {
    /// True when the zone may change while the broker runs (it comes from a file).
    pub fn is_live(&self) -> bool {
        self.file.is_some()
    }

    /// The zone now: the file's content when it names one, else the fixed name. A file that
    /// cannot be read counts as empty (it may not be written yet).
    pub fn read(&self) -> Option<String> {
        self.file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| normalize(&text))
            .or_else(|| self.fixed.as_deref().and_then(normalize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_wins_once_it_names_a_zone() {
        let dir = std::env::temp_dir().join(format!("conveyor-zone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("zone");
        let source = ZoneSource {
            fixed: Some("fallback".into()),
            file: Some(file.clone()),
        };
        assert!(source.is_live());
        assert_eq!(source.read().as_deref(), Some("fallback"), "no file yet");
        std::fs::write(&file, "").unwrap();
        assert_eq!(source.read().as_deref(), Some("fallback"), "empty file");
        std::fs::write(&file, "eu-west-1b\n").unwrap();
        assert_eq!(source.read().as_deref(), Some("eu-west-1b"));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!ZoneSource::default().is_live());
        assert_eq!(ZoneSource::default().read(), None);
    }
}
