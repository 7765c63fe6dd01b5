//! The controller's unit tests: its pure parts, and whole passes over the fake Kubernetes API
//! and the fake EC2.

use serde_json::json;

use super::inputs::argument_type;
use super::*;

#[test]
fn value_types_follow_the_arguments() {
    assert_eq!(argument_type("imageId"), Some(json!("string")));
    assert_eq!(argument_type("count"), Some(json!("number")));
    assert_eq!(argument_type("tags"), Some(json!(["map", "string"])));
    assert_eq!(argument_type("tags.team"), Some(json!("string")));
    assert_eq!(
        argument_type("securityGroupIds"),
        Some(json!(["list", "string"]))
    );
    assert_eq!(argument_type("securityGroupIds.1"), Some(json!("string")));
    assert_eq!(argument_type("securityGroupIds.x"), None);
    assert_eq!(argument_type("rootVolume"), Some(json!("dynamic")));
    assert_eq!(argument_type("rootVolume.size"), Some(json!("number")));
    assert_eq!(argument_type("rootVolume.iops"), None);
    assert_eq!(argument_type("imageIdx"), None);
    assert_eq!(argument_type("nope"), None);
}

#[test]
fn errors_map_to_reasons_a_user_can_act_on() {
    let ec2 = |kind, code: Option<&str>| {
        Error::Ec2(Ec2Error {
            operation: "RunInstances",
            kind,
            code: code.map(str::to_owned),
            message: "m".into(),
        })
    };
    assert_eq!(
        ec2(ErrorKind::Api, Some("InvalidAMIID.NotFound")).reason(),
        reasons::INVALID_PARAMETER
    );
    assert_eq!(
        ec2(ErrorKind::Api, Some("InsufficientInstanceCapacity")).reason(),
        reasons::AWS_ERROR
    );
    assert_eq!(
        ec2(ErrorKind::Credentials, None).reason(),
        reasons::CREDENTIALS
    );
    assert_eq!(
        ec2(ErrorKind::Unreachable, None).reason(),
        reasons::UNREACHABLE
    );
    assert_eq!(ec2(ErrorKind::Timeout, None).reason(), reasons::UNREACHABLE);
}

/// Whole passes of the real reconcile over the fake Kubernetes API and the fake EC2.
mod passes {
    use std::sync::Arc;

    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    use kube::runtime::controller::Action;
    use serde_json::{Value as Json, json};

    use super::super::super::client::{INDEX_TAG, Instance, OWNER_TAG, Target};
    use super::super::super::fake::{FakeEc2, Fault};
    use super::super::super::policy::{ADOPT_TAG, AwsPolicy};
    use super::super::{Context, Ec2Controller, Error, SETTLE, reasons};
    use kraken_core_kinds::ec2::EC2Instance;
    use kraken_kit::Kit;
    use kraken_kit::conditions::{READY, SYNCED, reason};
    use kraken_kit::fake_api::FakeApi;
    use kraken_kit::metrics::Metrics;
    use kraken_kit::reconciler::{Reconciler, run};

    const NS: &str = "team";

    struct World {
        api: FakeApi,
        ec2: FakeEc2,
        ctrl: Arc<Ec2Controller>,
    }

    fn controller(api: &FakeApi, ec2: &FakeEc2, policy: AwsPolicy) -> Arc<Ec2Controller> {
        let kit = Arc::new(Kit::new(api.client(), Arc::new(Metrics::new())));
        let ctx = Arc::new(Context {
            kit,
            hub_index: Arc::new(kraken_hub::Index::default()),
            policy,
        });
        Arc::new(Ec2Controller::with_factory(ctx, Arc::new(ec2.clone())))
    }

    /// A test lab's operator: it lends its (fake) credentials and allows a loopback emulator.
    fn lab() -> AwsPolicy {
        AwsPolicy {
            ambient_credentials: true,
            endpoints: vec!["http://127.0.0.1:*".into()],
            adopt_untagged: false,
        }
    }

    fn world() -> World {
        world_with(lab())
    }

    fn world_with(policy: AwsPolicy) -> World {
        let api = FakeApi::new();
        let ec2 = FakeEc2::new();
        let ctrl = controller(&api, &ec2, policy);
        World { api, ec2, ctrl }
    }

    /// The AwsConfig `name` reaching `endpoint` with the credentials of the Secret `creds`.
    fn aws_config(w: &World, name: &str, endpoint: &str) {
        w.api.insert(
            "awsconfigs",
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": name, "namespace": NS},
                   "spec": {"region": "eu-west-1", "endpoint": endpoint,
                            "credentials": {
                                "accessKeyIdSecretRef": {"name": "creds", "key": "id"},
                                "secretAccessKeySecretRef": {"name": "creds", "key": "secret"}}}}),
        );
    }

    fn spec(count: i64) -> Json {
        json!({"imageId": "ami-1", "instanceType": "t3.micro", "count": count,
               "tags": {"team": "web"}})
    }

    impl World {
        fn create(&self, name: &str, spec: Json) {
            self.api.insert(
                "ec2instances",
                json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
                       "metadata": {"name": name, "namespace": NS}, "spec": spec}),
            );
        }

        /// Like [`Self::create`], annotated to publish its StateDeclaration though nothing
        /// reads it.
        fn create_published(&self, name: &str, spec: Json) {
            self.api.insert(
                "ec2instances",
                json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
                       "metadata": {"name": name, "namespace": NS,
                                    "annotations": {"kraken.dev/publish": "true"}},
                       "spec": spec}),
            );
        }

        fn obj(&self, name: &str) -> Option<EC2Instance> {
            let o = self.api.get("ec2instances", NS, name)?;
            serde_json::from_value(o).ok()
        }

        fn uid(&self, name: &str) -> String {
            self.obj(name)
                .and_then(|o| o.metadata.uid)
                .unwrap_or_default()
        }

        /// One pass through the runner the controller runs it in: the requeue it chose.
        async fn pass(&self, name: &str) -> Action {
            let obj = self.obj(name).expect("object exists");
            run(self.ctrl.clone(), Arc::new(obj)).await
        }

        /// The same pass's own result, the error it ended with included.
        async fn attempt(&self, name: &str) -> Result<Action, Error> {
            let obj = self.obj(name).expect("object exists");
            Reconciler::reconcile(self.ctrl.clone(), Arc::new(obj)).await
        }

        /// Passes until one asks for no quick look again (at most 10).
        async fn settle(&self, name: &str) -> Action {
            for _ in 0..10 {
                let action = self.pass(name).await;
                if action != Action::requeue(SETTLE) || self.obj(name).is_none() {
                    return action;
                }
            }
            panic!("{name} did not settle in 10 passes");
        }

        fn condition(&self, name: &str, type_: &str) -> (String, String, String) {
            let obj = self.obj(name).expect("object exists");
            let status = obj.status.unwrap_or_default();
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == type_)
                .expect("condition set");
            (
                format!("{:?}", c.status),
                c.reason.clone(),
                c.message.clone(),
            )
        }

        async fn patch_spec(&self, name: &str, spec: Json) {
            let api: Api<EC2Instance> = Api::namespaced(self.api.client(), NS);
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .expect("patch spec");
        }

        async fn delete(&self, name: &str) {
            let api: Api<EC2Instance> = Api::namespaced(self.api.client(), NS);
            api.delete(name, &DeleteParams::default())
                .await
                .expect("delete");
        }

        /// Writes other than Events since request number `from`.
        fn writes_since(&self, from: usize) -> Vec<String> {
            self.api.requests()[from..]
                .iter()
                .filter(|r| r.method != "GET" && !r.path.contains("/events"))
                .map(|r| format!("{} {}", r.method, r.path))
                .collect()
        }

        fn mutating_calls_since(&self, from: usize) -> Vec<&'static str> {
            self.ec2.calls()[from..]
                .iter()
                .copied()
                .filter(|c| *c != "DescribeInstances")
                .collect()
        }
    }

    #[tokio::test]
    async fn count_two_launches_two_tags_them_and_a_settled_pass_writes_nothing() {
        let w = world();
        w.ec2.set_lag(1);
        w.create("web", spec(2));
        let action = w.settle("web").await;
        assert_ne!(action, Action::requeue(SETTLE));
        assert_eq!(w.ec2.launches(), 2);
        let uid = w.uid("web");
        let live = w.ec2.live();
        assert_eq!(live.len(), 2);
        for i in &live {
            assert_eq!(i.tag(OWNER_TAG), Some(uid.as_str()));
            assert_eq!(i.tag("team"), Some("web"));
            assert_eq!(i.state, "running");
        }
        let status = w.obj("web").and_then(|o| o.status).unwrap_or_default();
        assert_eq!(status.running, 2);
        assert_eq!(status.instances.len(), 2);
        assert!(status.instances.iter().all(|s| s.pending_launch.is_none()));
        assert_eq!(w.condition("web", READY).0, "True");
        assert_eq!(w.condition("web", SYNCED).1, reason::RECONCILE_SUCCESS);
        assert!(
            w.obj("web")
                .is_some_and(|o| o.metadata.finalizers.is_some())
        );
        // Nothing reads it: no StateDeclaration (see below for one that is published).
        assert_eq!(w.api.list("statedeclarations").len(), 0);
        let (requests, calls) = (w.api.requests().len(), w.ec2.calls().len());
        w.pass("web").await;
        assert_eq!(w.writes_since(requests), Vec::<String>::new());
        assert_eq!(w.mutating_calls_since(calls), Vec::<&str>::new());
    }

    #[tokio::test]
    async fn a_replica_whose_leadership_lapsed_launches_nothing() {
        use kraken_kit::fence::{Epoch, Fence};
        let api = FakeApi::new();
        let ec2 = FakeEc2::new();
        let fence = Fence::leased();
        let kit = Kit::new(api.client(), Arc::new(Metrics::new())).with_fence(fence.clone());
        let ctx = Arc::new(Context {
            kit: Arc::new(kit),
            hub_index: Arc::new(kraken_hub::Index::default()),
            policy: lab(),
        });
        let ctrl = Arc::new(Ec2Controller::with_factory(ctx, Arc::new(ec2.clone())));
        let w = World { api, ec2, ctrl };
        w.create("web", spec(2));
        let fenced = w.attempt("web").await;
        assert!(matches!(fenced, Err(Error::Fenced(_))), "{fenced:?}");
        assert_eq!(w.ec2.launches(), 0, "launched while fenced");
        let status = w.obj("web").and_then(|o| o.status).unwrap_or_default();
        assert!(
            status.conditions.iter().all(|c| c.reason != reason::FENCED),
            "a fenced replica reported on the object"
        );
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        fence.grant(Epoch::default(), until);
        w.settle("web").await;
        assert_eq!(w.ec2.launches(), 2);
    }

    #[tokio::test]
    async fn scaling_up_launches_and_down_terminates_the_highest_indices() {
        let w = world();
        w.create("web", spec(2));
        w.settle("web").await;
        w.patch_spec("web", json!({"count": 3})).await;
        w.settle("web").await;
        assert_eq!((w.ec2.launches(), w.ec2.live().len()), (3, 3));
        w.patch_spec("web", json!({"count": 1})).await;
        w.settle("web").await;
        let live = w.ec2.live();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].tag(INDEX_TAG), Some("0"));
        assert_eq!(w.ec2.launches(), 3);
        assert_eq!(w.condition("web", READY).2, "1 of 1 instances running");
    }

    #[tokio::test]
    async fn tags_and_security_groups_change_in_place() {
        let w = world();
        let mut s = spec(1);
        s["securityGroupIds"] = json!(["sg-a"]);
        w.create("web", s);
        w.settle("web").await;
        let id = w.ec2.live()[0].id.clone();
        w.patch_spec(
            "web",
            json!({"tags": {"team": null, "tier": "front"}, "securityGroupIds": ["sg-b", "sg-c"]}),
        )
        .await;
        w.settle("web").await;
        let i = w.ec2.instance(&id).expect("same instance");
        assert!(i.is_live());
        assert_eq!(i.security_group_ids, ["sg-b", "sg-c"]);
        assert_eq!(i.tag("tier"), Some("front"));
        assert_eq!(i.tag("team"), None);
        assert_eq!(w.ec2.launches(), 1);
    }

    #[tokio::test]
    async fn a_type_change_stops_modifies_and_starts_the_same_instance() {
        let w = world();
        w.create("web", spec(1));
        w.settle("web").await;
        let id = w.ec2.live()[0].id.clone();
        let calls = w.ec2.calls().len();
        w.patch_spec("web", json!({"instanceType": "t3.small"}))
            .await;
        w.settle("web").await;
        let i = w.ec2.instance(&id).expect("same instance");
        assert_eq!(
            (i.instance_type.as_str(), i.state.as_str()),
            ("t3.small", "running")
        );
        assert_eq!(
            w.mutating_calls_since(calls),
            ["StopInstances", "ModifyInstanceAttribute", "StartInstances"]
        );
        assert_eq!(w.ec2.launches(), 1);
    }

    #[tokio::test]
    async fn an_image_change_replaces_create_before_destroy() {
        let w = world();
        w.create("web", spec(1));
        w.settle("web").await;
        let old = w.ec2.live()[0].id.clone();
        w.patch_spec("web", json!({"imageId": "ami-2"})).await;
        w.settle("web").await;
        let live = w.ec2.live();
        assert_eq!(live.len(), 1);
        assert_ne!(live[0].id, old);
        assert_eq!(live[0].image_id, "ami-2");
        assert_eq!(w.ec2.launches(), 2);
        assert!(w.ec2.instance(&old).is_some_and(|i| !i.is_live()));
    }

    #[tokio::test]
    async fn an_instance_terminated_outside_is_replaced() {
        let w = world();
        w.create("web", spec(1));
        w.settle("web").await;
        let old = w.ec2.live()[0].id.clone();
        w.ec2.change(&old, |i| i.state = "terminated".into());
        w.settle("web").await;
        let live = w.ec2.live();
        assert_eq!((live.len(), w.ec2.launches()), (1, 2));
        assert_eq!(
            live[0].tag(super::super::super::client::LAUNCH_TAG),
            Some("1")
        );
        assert_eq!(w.condition("web", READY).0, "True");
    }

    #[tokio::test]
    async fn import_ids_are_adopted_without_a_launch() {
        let w = world();
        w.ec2.put(Instance {
            id: "i-import".into(),
            state: "running".into(),
            instance_type: "t3.micro".into(),
            image_id: "ami-1".into(),
            tags: [(ADOPT_TAG.to_string(), format!("{NS}/web"))].into(),
            ..Instance::default()
        });
        let mut s = spec(1);
        s["importIds"] = json!(["i-import"]);
        w.create("web", s);
        w.settle("web").await;
        assert_eq!(w.ec2.launches(), 0);
        let i = w.ec2.instance("i-import").expect("adopted");
        assert_eq!(i.tag(OWNER_TAG), Some(w.uid("web").as_str()));
        assert_eq!(w.condition("web", READY).0, "True");
    }

    #[tokio::test]
    async fn delete_terminates_then_releases_the_finalizer() {
        let w = world();
        w.create("web", spec(2));
        w.settle("web").await;
        w.delete("web").await;
        assert!(w.obj("web").is_some(), "the finalizer holds the object");
        w.settle("web").await;
        assert!(w.obj("web").is_none());
        assert!(w.ec2.live().is_empty());
        assert!(w.api.list("statedeclarations").is_empty());
    }

    #[tokio::test]
    async fn orphan_releases_without_terminating() {
        let w = world();
        let mut s = spec(1);
        s["deletionPolicy"] = json!("Orphan");
        w.create("web", s);
        w.settle("web").await;
        w.delete("web").await;
        w.pass("web").await;
        assert!(w.obj("web").is_none());
        assert_eq!(w.ec2.live().len(), 1);
    }

    #[tokio::test]
    async fn a_missing_aws_config_or_credentials_secret_is_named() {
        let w = world();
        let mut s = spec(1);
        s["awsConfigRef"] = json!({"name": "aws"});
        w.create("web", s);
        w.pass("web").await;
        let (status, why, message) = w.condition("web", SYNCED);
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reasons::AWS_CONFIG_MISSING)
        );
        assert!(message.contains("AwsConfig aws"), "{message}");
        aws_config(&w, "aws", "http://127.0.0.1:5000");
        w.pass("web").await;
        assert_eq!(w.condition("web", SYNCED).1, reason::SECRET_MISSING);
        assert_eq!(w.ec2.launches(), 0);
        w.api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": NS},
                   "data": {"id": "QUtJQQ==", "secret": "c2VjcmV0"}}),
        );
        w.settle("web").await;
        assert_eq!(w.ec2.launches(), 1);
        let target = Target {
            region: Some("eu-west-1".into()),
            endpoint: Some("http://127.0.0.1:5000".into()),
            credentials: Some(("AKIA".into(), "secret".into(), None)),
        };
        assert_eq!(w.ec2.targets().last(), Some(&target));
    }

    #[tokio::test]
    async fn an_untagged_instance_is_not_adopted() {
        let w = world();
        let someone_elses = Instance {
            id: "i-prod".into(),
            state: "running".into(),
            instance_type: "m5.large".into(),
            image_id: "ami-1".into(),
            // Tagged for another namespace's object of the same name.
            tags: [(ADOPT_TAG.to_string(), "other/web".to_string())].into(),
            ..Instance::default()
        };
        w.ec2.put(someone_elses.clone());
        let mut s = spec(1);
        s["importIds"] = json!(["i-prod"]);
        w.create("web", s);
        w.pass("web").await;
        let (status, why, message) = w.condition("web", SYNCED);
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reasons::IMPORT_FAILED)
        );
        assert!(
            message.contains("kraken.dev/adoptable-by=team/web"),
            "{message}"
        );
        // Untouched: no owner tag written, and deleting the object cannot terminate it.
        assert_eq!(w.ec2.instance("i-prod"), Some(someone_elses));
        w.delete("web").await;
        w.settle("web").await;
        assert!(w.obj("web").is_none());
        assert_eq!(
            w.ec2.instance("i-prod").map(|i| i.state),
            Some("running".into())
        );
    }

    #[tokio::test]
    async fn the_operators_credentials_and_foreign_endpoints_are_refused() {
        let w = world_with(AwsPolicy {
            endpoints: vec!["http://127.0.0.1:*".into()],
            ..AwsPolicy::default()
        });
        // No AwsConfig: it would be the operator's own credentials.
        w.create("ambient", spec(1));
        w.pass("ambient").await;
        let (_, why, message) = w.condition("ambient", SYNCED);
        assert_eq!(why, reasons::CREDENTIALS_REQUIRED, "{message}");
        // An AwsConfig pointing at the cloud metadata endpoint.
        w.api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": NS},
                   "data": {"id": "QUtJQQ==", "secret": "c2VjcmV0"}}),
        );
        aws_config(&w, "imds", "http://169.254.169.254");
        let mut s = spec(1);
        s["awsConfigRef"] = json!({"name": "imds"});
        w.create("imds", s);
        w.pass("imds").await;
        let (_, why, message) = w.condition("imds", SYNCED);
        assert_eq!(why, reasons::ENDPOINT_NOT_ALLOWED, "{message}");
        assert!(message.contains("169.254.169.254"), "{message}");
        // Neither reached EC2 at all.
        assert!(w.ec2.targets().is_empty(), "{:?}", w.ec2.targets());
        assert_eq!(w.ec2.launches(), 0);
    }

    #[tokio::test]
    async fn throttling_retries_and_an_invalid_parameter_is_reported() {
        let w = world();
        w.create("web", spec(1));
        w.ec2.fail_next("RunInstances", Fault::Throttling);
        let action = w.pass("web").await;
        assert_ne!(action, Action::await_change());
        assert_eq!(w.condition("web", SYNCED).1, reasons::AWS_ERROR);
        w.settle("web").await;
        assert_eq!(
            (w.ec2.launches(), w.condition("web", READY).0.as_str()),
            (1, "True")
        );

        let w = world();
        w.create("web", spec(1));
        w.ec2.fail_next("RunInstances", Fault::InvalidParameter);
        w.pass("web").await;
        let (status, why, message) = w.condition("web", SYNCED);
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reasons::INVALID_PARAMETER)
        );
        assert!(message.contains("InvalidParameterValue"), "{message}");
        let status = w.obj("web").and_then(|o| o.status).unwrap_or_default();
        assert!(status.instances.iter().all(|s| s.pending_launch.is_none()));
    }

    #[tokio::test]
    async fn a_crash_between_launch_and_status_write_launches_nothing_new() {
        // Without lag the restarted pass finds the instances by their owner tag; with it, EC2
        // does not list them yet and the fenced launch repeats its idempotency token.
        for lag in [0, 2] {
            let w = world();
            w.ec2.set_lag(lag);
            w.create_published("web", spec(2));
            // The StateDeclaration write comes after the launches and before the status
            // records them: failing it ends the pass as a crash would.
            w.api.fail_next("POST", "/statedeclarations", 500);
            assert!(w.attempt("web").await.is_err());
            assert_eq!(w.ec2.launches(), 2);
            let fenced = w.obj("web").and_then(|o| o.status).unwrap_or_default();
            assert!(fenced.instances.iter().all(|s| s.id.is_empty()));
            // A restarted operator: nothing in memory.
            let restarted = World {
                ctrl: controller(&w.api, &w.ec2, lab()),
                api: w.api.clone(),
                ec2: w.ec2.clone(),
            };
            restarted.settle("web").await;
            assert_eq!(w.ec2.launches(), 2, "lag {lag}");
            assert_eq!(w.ec2.live().len(), 2);
            assert_eq!(restarted.condition("web", READY).0, "True");
        }
    }

    #[tokio::test]
    async fn a_conflict_on_the_status_write_converges() {
        let w = world();
        w.create("web", spec(2));
        w.api.fail_next("PATCH", "/status", 409);
        assert!(w.attempt("web").await.is_err());
        w.settle("web").await;
        assert_eq!((w.ec2.launches(), w.ec2.live().len()), (2, 2));
        assert_eq!(w.condition("web", READY).0, "True");
    }

    /// Through the runner: what EC2 refuses is retried with the kit's backoff; a spec the
    /// controller cannot act on waits for a change, and both are counted under their reason.
    #[tokio::test]
    async fn failures_back_off_or_wait_for_a_change() {
        let w = world();
        w.create("web", spec(1));
        w.ec2.fail_next("RunInstances", Fault::Throttling);
        let action = w.pass("web").await;
        assert_ne!(action, Action::await_change(), "retried");
        let uid = w.uid("web");
        assert_eq!(w.ctrl.ctx.backoff.failures(&uid), 1);
        w.settle("web").await;
        assert_eq!(w.ctrl.ctx.backoff.failures(&uid), 0, "reset by the success");

        w.create("no-image", json!({"instanceType": "t3.micro"}));
        assert_eq!(w.pass("no-image").await, Action::await_change());
        let (_, why, message) = w.condition("no-image", SYNCED);
        assert_eq!(why, reason::INVALID_SPEC, "{message}");
        assert_eq!(w.ctrl.ctx.backoff.failures(&w.uid("no-image")), 0);
        let text = w.ctrl.ctx.metrics.encode();
        for why in [reasons::AWS_ERROR, reason::INVALID_SPEC] {
            let series = format!(
                "kraken_reconcile_failures_total{{kind=\"EC2Instance.aws.kraken.dev\",reason=\"{why}\"}} 1\n"
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        assert_eq!(w.ec2.launches(), 1);
    }
}
