//! The create fence Kraken can vouch for.
//!
//! Before a create, Kraken records the attempt on the object (the annotation
//! [`super::CREATE_ATTEMPT_ANNOTATION`]); if no state completes it, the next pass looks for what
//! that create made before creating again ([`super::recover`]), by the owner tag and by the
//! identities the spec gives (its `name`). An annotation is the namespace user's to write, so a
//! planted fence would turn "find my own object" into "take any object of that name", and the
//! delete that follows would destroy it. The fence is therefore sealed: the attempt's time, a
//! `.`, and an HMAC (under the operator's key, a domain of its own) of the object's UID and that
//! time. Only a fence whose seal holds is looked for by name; any other is looked for only by
//! the owner tag, which proves what the create made.

use super::plan_key::PlanKey;

/// The HMAC domain of create fences.
const DOMAIN: &str = "kraken.dev/create-fence/v1";

/// The fence value for an attempt at `time` on the object `uid`.
pub fn seal(key: &PlanKey, uid: &str, time: &str) -> String {
    format!("{time}.{}", digest(key, uid, time))
}

/// Whether `fence` is one Kraken wrote for the object `uid`.
pub fn holds(key: &PlanKey, uid: &str, fence: &str) -> bool {
    match fence.rsplit_once('.') {
        Some((time, seal)) => digest(key, uid, time) == seal,
        None => false,
    }
}

fn digest(key: &PlanKey, uid: &str, time: &str) -> String {
    key.digest(DOMAIN, &[uid.as_bytes(), time.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fence_sealed_for_the_object_holds() {
        let key = PlanKey::from_bytes([7; 32]);
        let fence = seal(&key, "uid-1", "2026-12-06T12:00:00Z");
        assert!(fence.starts_with("2026-12-06T12:00:00Z."));
        assert!(holds(&key, "uid-1", &fence));
        // Another object, another time, another key, no seal, a planted value: none hold.
        assert!(!holds(&key, "uid-2", &fence));
        let moved = fence.replace("12:00:00", "12:00:01");
        assert!(!holds(&key, "uid-1", &moved));
        assert!(!holds(&PlanKey::from_bytes([8; 32]), "uid-1", &fence));
        assert!(!holds(&key, "uid-1", "2026-12-06T12:00:00Z"));
        assert!(!holds(&key, "uid-1", "t1"));
    }
}
