//! WebSockets to the manager, for what a request and its answer cannot carry: the agent's
//! tunnel, a terminal, a forwarded port. Same server, token and TLS settings as the
//! [`Client`]'s requests; a refusal before the upgrade is the same [`ClientError`].

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::client::Client;
use crate::error::{ClientError, Transport};

/// A connection that is plain TCP or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// An open WebSocket to the manager.
pub type WebSocket = tokio_tungstenite::WebSocketStream<Box<dyn Io>>;
pub use tokio_tungstenite::tungstenite::{Error, Message};

/// The largest message either side sends (a tunnel frame is at most 64 KiB of data).
const MAX_MESSAGE: usize = 1 << 20;

impl Client {
    /// Opens a WebSocket to `/api/v1/` plus `path`, with this client's token.
    pub async fn websocket<S: AsRef<str>>(
        &self,
        path: &[S],
        query: &[(&str, Option<String>)],
    ) -> Result<WebSocket, ClientError> {
        let mut url = self.url(path, query);
        let https = url.scheme() == "https";
        url.set_scheme(if https { "wss" } else { "ws" })
            .expect("ws and wss are valid schemes");
        let host = url.host_str().unwrap_or_default().to_string();
        let port = url
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        let transport = |kind: Transport, cause: String| ClientError::Transport {
            server: self.server().to_string(),
            kind,
            cause,
            ca_file: self.ca_file().map(|p| p.to_path_buf()),
        };
        let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| transport(Transport::Unreachable, e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = if https {
            let mut config = crate::tls::rustls_config(true, self.ca_file())?;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|e| transport(Transport::Other, e.to_string()))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| transport(Transport::Other, format!("TLS: {e}")))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| transport(Transport::Other, e.to_string()))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.token()))
            .map_err(|_| transport(Transport::Other, "the token is not a header value".into()))?;
        request.headers_mut().insert("authorization", bearer);
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        match tokio_tungstenite::client_async_with_config(request, io, Some(config)).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default()
                    .into_owned();
                Err(self.refusal(response.status(), &body))
            }
            Err(e) => Err(transport(Transport::Other, e.to_string())),
        }
    }
}
