//! In-process round trips through the generated tonic servers and clients,
//! over a loopback TCP listener. They show how test fakes are written: the
//! server traits have default `Unimplemented` bodies, so a fake implements
//! only the RPCs it needs.

use std::net::SocketAddr;

use kraken_proto::{plugin, tfplugin5, tfplugin6};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codegen::BoxStream;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

/// Serves one generated service on an ephemeral loopback port until the
/// returned sender is dropped or fired.
///
/// This uses `Server::serve_with_incoming_shutdown`, which takes a single
/// service; serving several services on one port (as a real go-plugin server
/// does) needs `Server::add_service`, i.e. tonic's `router` feature, which the
/// workspace does not enable.
async fn serve<S>(svc: S) -> (SocketAddr, oneshot::Sender<()>)
where
    S: tonic::codegen::Service<
            tonic::codegen::http::Request<tonic::body::Body>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        Server::builder()
            .serve_with_incoming_shutdown(svc, TcpListenerStream::new(listener), async {
                let _ = rx.await;
            })
            .await
            .expect("server");
    });
    (addr, tx)
}

async fn channel(addr: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

#[derive(Default)]
struct FakeV6;

#[tonic::async_trait]
impl tfplugin6::provider_server::Provider for FakeV6 {
    async fn get_metadata(
        &self,
        _request: Request<tfplugin6::get_metadata::Request>,
    ) -> Result<Response<tfplugin6::get_metadata::Response>, Status> {
        Ok(Response::new(tfplugin6::get_metadata::Response {
            resources: vec![tfplugin6::get_metadata::ResourceMetadata {
                type_name: "fake_thing".to_owned(),
            }],
            ..Default::default()
        }))
    }

    async fn list_resource(
        &self,
        request: Request<tfplugin6::list_resource::Request>,
    ) -> Result<Response<BoxStream<tfplugin6::list_resource::Event>>, Status> {
        let limit = usize::try_from(request.into_inner().limit).unwrap_or(0);
        let events = (0..limit).map(|i| {
            Ok(tfplugin6::list_resource::Event {
                display_name: format!("item-{i}"),
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }
}

#[tokio::test]
async fn tfplugin6_fake_provider_round_trip() {
    let (addr, _stop) = serve(tfplugin6::provider_server::ProviderServer::new(FakeV6)).await;
    let mut client = tfplugin6::provider_client::ProviderClient::new(channel(addr).await);

    let meta = client
        .get_metadata(tfplugin6::get_metadata::Request {})
        .await
        .expect("get_metadata")
        .into_inner();
    assert_eq!(meta.resources.len(), 1);
    assert_eq!(meta.resources[0].type_name, "fake_thing");

    let mut stream = client
        .list_resource(tfplugin6::list_resource::Request {
            limit: 3,
            ..Default::default()
        })
        .await
        .expect("list_resource")
        .into_inner();
    let mut names = Vec::new();
    while let Some(event) = stream.next().await {
        names.push(event.expect("event").display_name);
    }
    assert_eq!(names, ["item-0", "item-1", "item-2"]);

    // Methods the fake does not implement answer Unimplemented.
    let err = client
        .plan_resource_change(tfplugin6::plan_resource_change::Request::default())
        .await
        .expect_err("default stub");
    assert_eq!(err.code(), Code::Unimplemented);
}

struct FakeV5;

#[tonic::async_trait]
impl tfplugin5::provider_server::Provider for FakeV5 {
    async fn get_schema(
        &self,
        _request: Request<tfplugin5::get_provider_schema::Request>,
    ) -> Result<Response<tfplugin5::get_provider_schema::Response>, Status> {
        let mut resp = tfplugin5::get_provider_schema::Response {
            server_capabilities: Some(tfplugin5::ServerCapabilities {
                plan_destroy: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        resp.resource_schemas.insert(
            "fake_thing".to_owned(),
            tfplugin5::Schema {
                version: 2,
                block: Some(tfplugin5::schema::Block::default()),
            },
        );
        Ok(Response::new(resp))
    }
}

#[tokio::test]
async fn tfplugin5_fake_provider_round_trip() {
    let (addr, _stop) = serve(tfplugin5::provider_server::ProviderServer::new(FakeV5)).await;
    let mut client = tfplugin5::provider_client::ProviderClient::new(channel(addr).await);

    let schema = client
        .get_schema(tfplugin5::get_provider_schema::Request {})
        .await
        .expect("get_schema")
        .into_inner();
    assert_eq!(schema.resource_schemas["fake_thing"].version, 2);
    assert!(schema.server_capabilities.is_some_and(|c| c.plan_destroy));

    let err = client
        .stop(tfplugin5::stop::Request {})
        .await
        .expect_err("default stub");
    assert_eq!(err.code(), Code::Unimplemented);
}

struct FakeStdio;

#[tonic::async_trait]
impl plugin::grpc_stdio_server::GrpcStdio for FakeStdio {
    async fn stream_stdio(
        &self,
        _request: Request<()>,
    ) -> Result<Response<BoxStream<plugin::StdioData>>, Status> {
        let chunks = vec![
            Ok(plugin::StdioData {
                channel: plugin::stdio_data::Channel::Stdout as i32,
                data: b"out".to_vec(),
            }),
            Ok(plugin::StdioData {
                channel: plugin::stdio_data::Channel::Stderr as i32,
                data: b"err".to_vec(),
            }),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }
}

struct FakeController {
    shutdowns: tokio::sync::mpsc::UnboundedSender<()>,
}

#[tonic::async_trait]
impl plugin::grpc_controller_server::GrpcController for FakeController {
    async fn shutdown(
        &self,
        _request: Request<plugin::Empty>,
    ) -> Result<Response<plugin::Empty>, Status> {
        let _ = self.shutdowns.send(());
        Ok(Response::new(plugin::Empty {}))
    }
}

#[tokio::test]
async fn go_plugin_services_round_trip() {
    let (shutdown_tx, mut shutdown_rx) = tokio::sync::mpsc::unbounded_channel();
    let (stdio_addr, _stop_stdio) =
        serve(plugin::grpc_stdio_server::GrpcStdioServer::new(FakeStdio)).await;
    let (controller_addr, _stop_controller) = serve(
        plugin::grpc_controller_server::GrpcControllerServer::new(FakeController {
            shutdowns: shutdown_tx,
        }),
    )
    .await;

    let mut stdio = plugin::grpc_stdio_client::GrpcStdioClient::new(channel(stdio_addr).await);
    let mut stream = stdio
        .stream_stdio(())
        .await
        .expect("stream_stdio")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("chunk");
        seen.push((chunk.channel, chunk.data));
    }
    assert_eq!(
        seen,
        [
            (plugin::stdio_data::Channel::Stdout as i32, b"out".to_vec()),
            (plugin::stdio_data::Channel::Stderr as i32, b"err".to_vec()),
        ]
    );

    let mut controller =
        plugin::grpc_controller_client::GrpcControllerClient::new(channel(controller_addr).await);
    controller
        .shutdown(plugin::Empty {})
        .await
        .expect("shutdown");
    assert_eq!(shutdown_rx.recv().await, Some(()));
}
