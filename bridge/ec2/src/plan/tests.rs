//! The planner's rules, one scenario each.

use super::*;

fn owner() -> Owner {
    Owner {
        uid: "0a1b2c3d-0000-4000-8000-000000000001".into(),
        namespace: "team".into(),
        name: "web".into(),
    }
}

fn desired(count: i64) -> Desired {
    Desired {
        count,
        image_id: "ami-1".into(),
        instance_type: "t3.micro".into(),
        subnet_id: None,
        security_group_ids: vec![],
        key_name: None,
        user_data: None,
        root_volume: None,
        tags: BTreeMap::from([("env".to_owned(), "dev".to_owned())]),
        import_ids: vec![],
        refuse_replace: false,
    }
}

/// A running instance as Kraken launched it for `index`, `launch`.
fn launched(d: &Desired, id: &str, index: i64, launch: i64) -> Instance {
    Instance {
        id: id.into(),
        state: "running".into(),
        instance_type: d.instance_type.clone(),
        image_id: d.image_id.clone(),
        subnet_id: "subnet-default".into(),
        tags: d.tags_for(&owner(), index, launch),
        ..Default::default()
    }
}

#[test]
fn a_new_object_launches_every_index_with_fenced_tokens() {
    let d = desired(3);
    let p = plan(&d, &owner(), &[], &[]);
    assert_eq!(p.steps.len(), 3);
    for (i, step) in p.steps.iter().enumerate() {
        assert_eq!(
            *step,
            Step::Launch {
                index: i as i64,
                launch: 0,
                replaces: None,
                relaunch_of: None
            }
        );
    }
    assert!(p.slots.iter().all(|s| s.pending_launch == Some(0)));
    assert!(!p.settled);
    let l = d.launch(&owner(), 1, 0);
    assert!(l.client_token.len() <= 64, "{}", l.client_token);
    assert!(l.client_token.starts_with(&format!("{}-1-0-", owner().uid)));
    assert_eq!(l.tags[OWNER_TAG], owner().uid);
    assert_eq!(l.tags[INDEX_TAG], "1");
    assert_eq!(l.tags["Name"], "web-1");
    // The same parameters give the same token; another parameter another one.
    assert_eq!(d.launch(&owner(), 1, 0).client_token, l.client_token);
    let mut d2 = d.clone();
    d2.image_id = "ami-2".into();
    assert_ne!(d2.launch(&owner(), 1, 0).client_token, l.client_token);
    let mut d3 = d.clone();
    d3.user_data = Some("#!/bin/sh".into());
    assert_ne!(d3.launch(&owner(), 1, 0).client_token, l.client_token);
    // Debug output (logs) never carries the user data.
    assert!(!format!("{:?}", d3.launch(&owner(), 1, 0)).contains("#!/bin/sh"));
}

#[test]
fn a_launch_in_flight_is_retried_with_the_same_launch_number() {
    let d = desired(1);
    let prev = vec![InstanceStatus {
        index: 0,
        launch: 0,
        state: "launching".into(),
        pending_launch: Some(0),
        ..Default::default()
    }];
    let p = plan(&d, &owner(), &[], &prev);
    assert!(matches!(p.steps[0], Step::Launch { launch: 0, .. }));
    // Once EC2 shows it, it is adopted by its tags: nothing to launch.
    let seen = launched(&d, "i-1", 0, 0);
    let p = plan(&d, &owner(), &[seen], &prev);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert!(p.settled);
    assert_eq!(p.slots[0].id, "i-1");
    assert_eq!(p.slots[0].pending_launch, None);
}

#[test]
fn an_instance_terminated_outside_is_relaunched_with_a_new_launch_number() {
    let d = desired(2);
    let mut gone = launched(&d, "i-0", 0, 0);
    gone.state = "terminated".into();
    let live = launched(&d, "i-1", 1, 0);
    let prev = vec![slot_of(0, &launched(&d, "i-0", 0, 0)), slot_of(1, &live)];
    let p = plan(&d, &owner(), &[gone, live], &prev);
    assert_eq!(
        p.steps,
        vec![Step::Launch {
            index: 0,
            launch: 1,
            replaces: None,
            relaunch_of: Some("i-0".into())
        }]
    );
}

#[test]
fn scaling_down_terminates_the_highest_indices() {
    let d3 = desired(3);
    let obs: Vec<Instance> = (0..3)
        .map(|i| launched(&d3, &format!("i-{i}"), i, 0))
        .collect();
    let p = plan(&desired(1), &owner(), &obs, &[]);
    let mut ids: Vec<&str> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Terminate {
                id,
                why: Surplus::ScaleDown,
            } => id.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["i-1", "i-2"]);
    assert_eq!(p.slots.len(), 1);
}

#[test]
fn an_image_change_replaces_create_before_destroy_unless_refused() {
    let d = desired(1);
    let old = launched(&d, "i-old", 0, 0);
    let mut d2 = d.clone();
    d2.image_id = "ami-2".into();
    let p = plan(&d2, &owner(), std::slice::from_ref(&old), &[]);
    assert_eq!(
        p.steps,
        vec![Step::Launch {
            index: 0,
            launch: 1,
            replaces: Some(("i-old".into(), vec!["imageId".into()])),
            relaunch_of: None
        }]
    );
    // With the replacement running, the old one is superseded.
    let new = launched(&d2, "i-new", 0, 1);
    let p = plan(&d2, &owner(), &[old.clone(), new], &[]);
    assert_eq!(
        p.steps,
        vec![Step::Terminate {
            id: "i-old".into(),
            why: Surplus::Superseded
        }]
    );
    d2.refuse_replace = true;
    let p = plan(&d2, &owner(), &[old], &[]);
    assert!(p.steps.is_empty());
    assert_eq!(p.refused[0].paths, vec!["imageId".to_owned()]);
}

#[test]
fn user_data_and_root_volume_changes_are_seen_through_the_digest_tag() {
    let d = desired(1);
    let old = launched(&d, "i-1", 0, 0);
    let mut d2 = d.clone();
    d2.user_data = Some("#!/bin/sh\necho hi".into());
    d2.root_volume = Some(RootVolume {
        size: Some(20),
        r#type: Some("gp3".into()),
    });
    assert_eq!(replace_paths(&d2, &old), ["userData", "rootVolume"]);
    // Refused, the digest tag is left as it is, so the difference stays visible.
    d2.refuse_replace = true;
    let p = plan(&d2, &owner(), std::slice::from_ref(&old), &[]);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.refused[0].paths, ["userData", "rootVolume"]);
    // The digest never holds the user data itself.
    assert!(!d2.config_tag().contains("echo"));
    // An adopted instance without the tag is not replaced for it.
    let mut adopted = old;
    adopted.tags.remove(CONFIG_TAG);
    assert!(replace_paths(&d2, &adopted).is_empty());
}

#[test]
fn an_instance_being_replaced_is_not_changed_in_place() {
    let d = desired(1);
    let old = launched(&d, "i-old", 0, 0);
    let mut d2 = d.clone();
    d2.image_id = "ami-2".into();
    d2.instance_type = "t3.large".into();
    d2.tags.insert("new".into(), "tag".into());
    let p = plan(&d2, &owner(), &[old], &[]);
    assert!(
        matches!(p.steps[..], [Step::Launch { launch: 1, .. }]),
        "{:?}",
        p.steps
    );
}

#[test]
fn a_type_change_stops_then_resizes_a_stopped_instance() {
    let d = desired(1);
    let mut d2 = d.clone();
    d2.instance_type = "t3.small".into();
    let mut i = launched(&d, "i-1", 0, 0);
    let p = plan(&d2, &owner(), std::slice::from_ref(&i), &[]);
    assert_eq!(p.steps, vec![Step::StopToResize { id: "i-1".into() }]);
    i.state = "stopping".into();
    let p = plan(&d2, &owner(), std::slice::from_ref(&i), &[]);
    assert!(p.steps.is_empty() && p.transitional && !p.settled);
    i.state = "stopped".into();
    let p = plan(&d2, &owner(), std::slice::from_ref(&i), &[]);
    assert_eq!(
        p.steps,
        vec![Step::Resize {
            id: "i-1".into(),
            to: "t3.small".into()
        }]
    );
    // Stopped with the right type: started (drift).
    let p = plan(&d, &owner(), &[i], &[]);
    assert_eq!(p.steps, vec![Step::Start { id: "i-1".into() }]);
}

#[test]
fn tags_changed_outside_are_reverted_and_aws_tags_kept() {
    let d = desired(1);
    let mut i = launched(&d, "i-1", 0, 0);
    i.tags.insert("env".into(), "prod".into());
    i.tags.insert("added".into(), "x".into());
    i.tags.insert("aws:cloudformation:stack".into(), "s".into());
    let p = plan(&d, &owner(), &[i], &[]);
    assert_eq!(
        p.steps,
        vec![Step::Retag {
            id: "i-1".into(),
            set: BTreeMap::from([("env".to_owned(), "dev".to_owned())]),
            remove: vec!["added".into()],
        }]
    );
}

#[test]
fn import_ids_are_adopted_once() {
    let mut d = desired(2);
    d.import_ids = vec!["i-ext".into()];
    let p = plan(&d, &owner(), &[], &[]);
    assert_eq!(
        p.steps[0],
        Step::Adopt {
            index: 0,
            id: "i-ext".into()
        }
    );
    assert!(matches!(p.steps[1], Step::Launch { index: 1, .. }));
    // Adopted (tagged): an index like any other; terminated later: relaunched.
    let mut ext = launched(&d, "i-ext", 0, 0);
    let one = launched(&d, "i-1", 1, 0);
    let p = plan(&d, &owner(), &[ext.clone(), one.clone()], &[]);
    assert!(p.settled, "{:?}", p.steps);
    ext.state = "terminated".into();
    let p = plan(&d, &owner(), &[ext, one], &[]);
    assert!(matches!(
        p.steps[0],
        Step::Launch {
            index: 0,
            launch: 1,
            ..
        }
    ));
}

#[test]
fn other_owners_instances_are_ignored() {
    let d = desired(1);
    let mut foreign = launched(&d, "i-x", 0, 0);
    foreign.tags.insert(OWNER_TAG.into(), "someone-else".into());
    let p = plan(&d, &owner(), &[foreign], &[]);
    assert!(matches!(p.steps[..], [Step::Launch { .. }]));
}
