//! Who may follow a master: with ACL on, a slave's hello carries proof that it knows the
//! cluster secret — an HMAC-SHA1 over its group, broker id and the time, under the secret —
//! so that nobody else can connect to the replication port and read the group's log. The
//! time bounds how long a captured hello could be replayed.

use conveyor_remoting::acl::{signature, verify};

/// How far a hello's time may be from the master's clock.
const SKEW_MS: i64 = 5 * 60 * 1000;

fn content(broker_name: &str, broker_id: i64, at_ms: i64) -> Vec<u8> {
    format!("conveyor-replication|{broker_name}|{broker_id}|{at_ms}").into_bytes()
}

/// The proof a slave sends: `<time ms>:<signature>`.
pub fn prove(secret: &str, broker_name: &str, broker_id: i64, now_ms: i64) -> String {
    format!(
        "{now_ms}:{}",
        signature(secret, &content(broker_name, broker_id, now_ms))
    )
}

/// Checks a slave's proof; `Err` says why it is refused.
pub fn check(
    secret: &str,
    broker_name: &str,
    broker_id: i64,
    proof: &str,
    now_ms: i64,
) -> Result<(), String> {
    let Some((at, sig)) = proof.split_once(':') else {
        return Err("the slave did not prove it knows the cluster secret (ACL is on)".into());
    };
    let at: i64 = at
        .parse()
        .map_err(|_| "the slave's proof is malformed".to_string())?;
    if (now_ms - at).abs() > SKEW_MS {
        return Err("the slave's proof is stale (or the clocks differ by over 5 minutes)".into());
    }
    if !verify(
        secret,
        [content(broker_name, broker_id, at).as_slice()],
        sig,
    ) {
        return Err("the slave's proof does not match the cluster secret".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_group_and_id_within_the_skew_only() {
        let p = prove("a-cluster-secret-1234", "broker-a", 1, 1_000_000);
        assert_eq!(
            check("a-cluster-secret-1234", "broker-a", 1, &p, 1_000_500),
            Ok(())
        );
        assert!(check("another-secret-12345", "broker-a", 1, &p, 1_000_500).is_err());
        assert!(check("a-cluster-secret-1234", "broker-b", 1, &p, 1_000_500).is_err());
        assert!(check("a-cluster-secret-1234", "broker-a", 2, &p, 1_000_500).is_err());
        assert!(check(
            "a-cluster-secret-1234",
            "broker-a",
            1,
            &p,
            1_000_000 + SKEW_MS + 1
        )
        .is_err());
        assert!(check("a-cluster-secret-1234", "broker-a", 1, "", 1_000_000).is_err());
    }
}
