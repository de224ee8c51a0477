//! NamesrvSettings: the name server's settings that `mqadmin updateNamesrvConfig` changes at
//! run time and `getNamesrvConfig` prints, under RocketMQ's NamesrvConfig names. Only settings
//! Conveyor acts on are accepted; any other key is refused with the list of those that are, so
//! an operator never believes a change took effect when it did not (RocketMQ silently ignores
//! unknown keys). Changes last until the process restarts, as the name server keeps no files.

use std::collections::BTreeMap;

/// Why an update was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// A key that cannot change at run time (or is unknown).
    #[error(
        "cannot change {keys} at run time; the name server's changeable settings are: {changeable}"
    )]
    Fixed {
        /// The refused keys, comma-separated.
        keys: String,
        /// Keys that can change.
        changeable: String,
    },
    /// A value that does not parse for its key.
    #[error("bad value {value:?} for {key}: expected true or false")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
}

/// The settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamesrvSettings {
    /// `orderMessageEnable`: routes carry the topic's `ORDER_TOPIC_CONFIG` KV entry
    /// (`orderTopicConf`, mqadmin `updateOrderConf`).
    pub order_message_enable: bool,
    /// `returnOrderTopicConfigToBroker`: registration answers carry the `ORDER_TOPIC_CONFIG`
    /// namespace.
    pub return_order_topic_config_to_broker: bool,
    /// `enableTopicList`: GET_ALL_TOPIC_LIST_FROM_NAMESERVER answers (off: refused).
    pub enable_topic_list: bool,
    /// `listenPort` (read-only here): where the name server listens.
    pub listen_port: u16,
}

impl NamesrvSettings {
    /// RocketMQ's defaults, listening on `listen_port`.
    pub fn new(listen_port: u16) -> Self {
        Self {
            order_message_enable: false,
            return_order_topic_config_to_broker: true,
            enable_topic_list: true,
            listen_port,
        }
    }

    /// Keys `update` accepts.
    const CHANGEABLE: [&'static str; 3] = [
        "orderMessageEnable",
        "returnOrderTopicConfigToBroker",
        "enableTopicList",
    ];

    /// The settings as RocketMQ's `key=value` lines, sorted (GET_NAMESRV_CONFIG's body).
    pub fn to_properties(&self) -> String {
        let pairs: BTreeMap<&str, String> = [
            ("orderMessageEnable", self.order_message_enable.to_string()),
            (
                "returnOrderTopicConfigToBroker",
                self.return_order_topic_config_to_broker.to_string(),
            ),
            ("enableTopicList", self.enable_topic_list.to_string()),
            ("listenPort", self.listen_port.to_string()),
        ]
        .into_iter()
        .collect();
        pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// Applies `key=value` lines (UPDATE_NAMESRV_CONFIG's body): all of them, or none when
    /// one is refused.
    pub fn update(&mut self, body: &str) -> Result<(), SettingsError> {
        let pairs = conveyor_protocol::properties::parse(body);
        let fixed: Vec<&str> = pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !Self::CHANGEABLE.contains(k))
            .collect();
        if !fixed.is_empty() {
            return Err(SettingsError::Fixed {
                keys: fixed.join(", "),
                changeable: Self::CHANGEABLE.join(", "),
            });
        }
        let mut next = self.clone();
        for (key, value) in &pairs {
            let flag = value.parse::<bool>().map_err(|_| SettingsError::BadValue {
                key: key.clone(),
                value: value.clone(),
            })?;
            match key.as_str() {
                "orderMessageEnable" => next.order_message_enable = flag,
                "returnOrderTopicConfigToBroker" => next.return_order_topic_config_to_broker = flag,
                _ => next.enable_topic_list = flag,
            }
        }
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changeable_keys_change_and_print() {
        let mut s = NamesrvSettings::new(9876);
        s.update("orderMessageEnable=true\n\n# comment\n").unwrap();
        assert!(s.order_message_enable);
        let text = s.to_properties();
        assert!(text.contains("orderMessageEnable=true\n"), "{text}");
        assert!(text.contains("listenPort=9876\n"), "{text}");
    }

    #[test]
    fn a_fixed_or_bad_key_changes_nothing() {
        let mut s = NamesrvSettings::new(9876);
        let e = s
            .update("enableTopicList=false\nlistenPort=1\n")
            .unwrap_err();
        assert!(matches!(e, SettingsError::Fixed { ref keys, .. } if keys == "listenPort"));
        assert!(s.enable_topic_list, "nothing applied");
        let e = s.update("orderMessageEnable=yes\n").unwrap_err();
        assert!(matches!(e, SettingsError::BadValue { .. }));
        assert!(!s.order_message_enable);
    }
}
