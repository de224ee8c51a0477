//! Where the backlog and the queue cap come from: a Prometheus server (the query KEDA's
//! Prometheus scaler would send, answered the same way but stricter: an empty result is "no
//! data", never zero) or the brokers themselves (the admin API's consumer progress, as
//! `mqadmin consumerProgress` computes it). The cap comes from the name servers' routes in
//! both cases: a push or pull consumer needs a read queue of its own.

use std::time::Duration;

use conveyor_client::route::subscribe_queues;
use conveyor_client::Admin;

/// How long one backlog or route read may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The default PromQL query: the group's backlog on `topics`, summed over broker groups, with
/// a master and its slaves (same `node_id`) counted once and the retry topic left out.
pub fn default_query(cluster: Option<&str>, group: &str, topics: &[String]) -> String {
    let topics = topics
        .iter()
        .map(|t| regex_escape(t))
        .collect::<Vec<_>>()
        .join("|");
    let mut selector = vec![
        format!("consumer_group=\"{}\"", label_escape(group)),
        format!("topic=~\"{}\"", label_escape(&topics)),
        "is_retry=\"false\"".to_string(),
    ];
    if let Some(cluster) = cluster {
        selector.insert(0, format!("cluster=\"{}\"", label_escape(cluster)));
    }
    format!(
        "sum(max by (cluster, node_id, consumer_group, topic) (rocketmq_consumer_lag_messages{{{}}}))",
        selector.join(",")
    )
}

/// A string inside a PromQL double-quoted string.
fn label_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A literal inside a (RE2) regular expression; RocketMQ names may contain `|` and `%`.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The number in a Prometheus `/api/v1/query` answer: `Ok(None)` for an empty vector (no
/// series: the group or Prometheus' data is gone), an error for anything but one finite,
/// non-negative sample.
pub fn parse_query_answer(body: &[u8]) -> Result<Option<f64>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if v["status"] != "success" {
        return Err(format!(
            "Prometheus refused the query: {}",
            v["error"].as_str().unwrap_or("no reason given")
        ));
    }
    let value = match v["data"]["resultType"].as_str() {
        Some("vector") => {
            let result = v["data"]["result"]
                .as_array()
                .ok_or("the answer has no result")?;
            match result.as_slice() {
                [] => return Ok(None),
                [one] => &one["value"],
                more => {
                    return Err(format!(
                        "the query returned {} series; it must aggregate to one (sum(...))",
                        more.len()
                    ))
                }
            }
        }
        Some("scalar") => &v["data"]["result"],
        other => return Err(format!("the query returned a {other:?}, not a number")),
    };
    let sample = value[1]
        .as_str()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or("a sample without a number")?;
    if !sample.is_finite() || sample < 0.0 {
        return Err(format!("the backlog read is {sample}"));
    }
    Ok(Some(sample))
}

/// Runs `query` on the Prometheus server at `server` (an `http://` or `https://` base URL),
/// authenticating and trusting as `options` say.
pub async fn prometheus_backlog(
    server: &str,
    query: &str,
    options: &conveyor_client::http::GetOptions,
) -> Result<u64, String> {
    let url = format!(
        "{}/api/v1/query?{}",
        server.trim_end_matches('/'),
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .finish()
    );
    let (status, body) = conveyor_client::http::get_with(&url, options, READ_TIMEOUT)
        .await
        .map_err(|e| format!("Prometheus: {e}"))?;
    // Prometheus answers a bad query with 400 and a JSON error: show its reason.
    if status == 401 || status == 403 {
        return Err(format!(
            "Prometheus at {server} refused the credentials (HTTP {status}): see \
             spec.prometheus.authentication"
        ));
    }
    if !(200..300).contains(&status) && status != 400 && status != 422 {
        return Err(format!("Prometheus at {server} answered HTTP {status}"));
    }
    match parse_query_answer(&body)? {
        Some(v) => Ok(v.round() as u64),
        None => Err("the query returned no series".into()),
    }
}

/// The group's backlog on `topics` from the brokers: for every readable queue, the queue's
/// end minus the group's committed offset (0 when it has none).
pub async fn broker_backlog(admin: &Admin, group: &str, topics: &[String]) -> Result<u64, String> {
    let mut total = 0u64;
    for topic in topics {
        let progress = admin
            .consumer_progress(group, topic)
            .await
            .map_err(|e| format!("backlog of {group} on {topic}: {e}"))?;
        total += progress.total_diff.max(0) as u64;
    }
    Ok(total)
}

/// The most consumers of one group that get a queue: a clustering consumer is given queues
/// of each topic it subscribes to, the same ranks first, so the topic with the most read
/// queues (over all broker groups) decides.
pub async fn queue_cap(admin: &Admin, topics: &[String]) -> Result<u32, String> {
    let mut cap = 0;
    for topic in topics {
        let route = admin
            .topic_route(topic)
            .await
            .map_err(|e| format!("route of {topic}: {e}"))?;
        cap = cap.max(subscribe_queues(topic, &route).len() as u32);
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_query_sums_deduplicated_series_of_the_topics() {
        let q = default_query(Some("mq"), "orders-cg", &["orders".into(), "a|b%c".into()]);
        assert_eq!(
            q,
            "sum(max by (cluster, node_id, consumer_group, topic) (rocketmq_consumer_lag_messages{cluster=\"mq\",consumer_group=\"orders-cg\",topic=~\"orders|a\\\\|b%c\",is_retry=\"false\"}))"
        );
        assert!(!default_query(None, "g", &["t".into()]).contains("cluster="));
    }

    #[test]
    fn answers_are_one_number_or_no_data_never_a_silent_zero() {
        let vector = |result: &str| {
            format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{result}]}}}}"#
            )
        };
        let one = r#"{"metric":{},"value":[1700000000.1,"1234"]}"#;
        assert_eq!(parse_query_answer(vector(one).as_bytes()), Ok(Some(1234.0)));
        assert_eq!(parse_query_answer(vector("").as_bytes()), Ok(None));
        let two = format!("{one},{one}");
        assert!(parse_query_answer(vector(&two).as_bytes())
            .unwrap_err()
            .contains("2 series"));
        let nan = r#"{"metric":{},"value":[1,"NaN"]}"#;
        assert!(parse_query_answer(vector(nan).as_bytes()).is_err());
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}"#;
        assert_eq!(parse_query_answer(scalar.as_bytes()), Ok(Some(7.0)));
        let refused =
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert!(parse_query_answer(refused.as_bytes())
            .unwrap_err()
            .contains("parse error"));
        assert!(parse_query_answer(b"<html>").is_err());
    }
}
