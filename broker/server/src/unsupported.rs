//! Requests Conveyor deliberately does not serve, and what an operator uses instead. A
//! RocketMQ tool sending one gets REQUEST_CODE_NOT_SUPPORTED with a remark naming the request
//! and the alternative, not a bare "not supported" (issue 13). Requests absent from this table
//! are answered with the bare remark: they are not known to be needed.

/// What to use instead of request `code`, if Conveyor deliberately does not serve it.
pub fn alternative(code: i32) -> Option<&'static str> {
    Some(match code {
        // 4.x ACL (updateAclConfig, deleteAclConfig, clusterAclConfigVersion,
        // updateGlobalWhiteAddr, getAclConfig) and 5.x users and ACLs (createUser …
        // listAcl).
        50..=54 | 3001..=3010 => {
            "access control (mqadmin's ACL and user commands) is not implemented yet: \
             restrict who reaches the brokers with network policies until it is"
        }
        // statsAll, brokerStatus's per-topic figures.
        315 => {
            "broker statistics (VIEW_BROKER_STATS_DATA, mqadmin statsAll) are served as \
             Prometheus metrics at /metrics instead"
        }
        // updateStaticTopic.
        513 => {
            "static topics (mqadmin updateStaticTopic) are not supported: create a regular topic \
             and change its queue count with updateTopic or a MessageQueueTopic"
        }
        // RocksDB ConsumeQueue tools.
        354 | 355 => "Conveyor's ConsumeQueues are files, not RocksDB: use queryCq to read one",
        // updateColdDataFlowCtrGroupConfig and its siblings.
        2001..=2003 => "cold-read flow control (mqadmin updateColdDataFlowCtrGroupConfig) is not configurable at run time",
        // addBroker / removeBroker (container mode).
        902 | 903 => "broker containers (mqadmin addBroker, removeBroker) are not supported: run one broker per process or pod",
        // getControllerConfig / updateControllerConfig.
        1009 | 1010 => {
            "the controller's settings (mqadmin getControllerConfig, updateControllerConfig) are \
             its command-line flags and configuration file: change them and restart it"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_and_static_topics_name_an_alternative_and_known_requests_do_not() {
        assert!(alternative(50).unwrap().contains("network policies"));
        assert!(alternative(3006).unwrap().contains("network policies"));
        assert!(alternative(513).unwrap().contains("updateTopic"));
        assert_eq!(alternative(10), None);
    }
}
