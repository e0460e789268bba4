//! A request's body read whole, for the handlers that parse it ([`WholeBody`]).
//!
//! axum's `Bytes` extractor keeps each chunk as it arrives and copies them all into one new
//! buffer after the last: for a container PUT of 30,000 services (10 MB), a copy into 2,500
//! fresh pages between the last byte and the parse, and the body held twice meanwhile. Here
//! each chunk is copied as it arrives, while the rest of the body is still on its way, into
//! one buffer of the length the request declares (within the body limit), and freed at once.
//! The limit (`DefaultBodyLimit`) and its 413 are axum's, as with `Bytes`.
//!
//! I/O: awaits the request's body.

use axum::RequestExt;
use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

/// The whole body of a request, in one buffer.
#[derive(Debug)]
pub struct WholeBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for WholeBody {
    type Rejection = Response;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Response> {
        let mut body = req.into_limited_body();
        // The declared length, already cut to the limit by the limited body.
        let hint = body.size_hint();
        let room = hint.upper().unwrap_or(hint.lower());
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(refused)?;
            if let Ok(data) = frame.into_data() {
                if buf.capacity() == 0 {
                    // Made once the first chunk came: a body refused at once (longer than the
                    // limit) takes no room.
                    buf.reserve_exact(usize::try_from(room).unwrap_or(0).max(data.len()));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(WholeBody(Bytes::from(buf)))
    }
}

/// The answer to a body that could not be read, as axum's `Bytes` gives it: 413 past the
/// limit (which the router's RESTCONF layer words), 400 otherwise.
fn refused(error: axum::Error) -> Response {
    // axum's body wraps its errors twice, as its own rejection unwraps them.
    let mut inner = error.into_inner();
    for _ in 0..2 {
        inner = match inner.downcast::<axum::Error>() {
            Ok(e) => e.into_inner(),
            Err(other) => other,
        };
    }
    if inner.is::<http_body_util::LengthLimitError>() {
        StatusCode::PAYLOAD_TOO_LARGE.into_response()
    } else {
        (
            StatusCode::BAD_REQUEST,
            format!("Failed to buffer the request body: {inner}"),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::body::Body;

    use super::*;

    fn request(chunks: Vec<Vec<u8>>, declared: Option<usize>) -> Request {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        );
        let mut builder = Request::builder().method("PUT").uri("/");
        if let Some(n) = declared {
            builder = builder.header("content-length", n);
        }
        builder.body(Body::from_stream(stream)).unwrap()
    }

    async fn read(req: Request) -> Result<Bytes, Response> {
        WholeBody::from_request(req, &())
            .await
            .map(|WholeBody(b)| b)
    }

    #[tokio::test]
    async fn chunks_are_joined_in_order_whether_or_not_a_length_is_declared() {
        let chunks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1000 + usize::from(i)]).collect();
        let whole: Vec<u8> = chunks.concat();
        for declared in [None, Some(whole.len())] {
            let got = read(request(chunks.clone(), declared)).await.unwrap();
            assert_eq!(got, whole);
        }
        assert!(read(request(vec![], None)).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_413_and_an_unreadable_one_400() {
        // No `DefaultBodyLimit` layer here: axum's default of 2 MB applies.
        let big = vec![vec![b'x'; 1 << 20]; 3];
        let refused = read(request(big, None)).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let failing = futures::stream::iter([
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let req = Request::builder().body(Body::from_stream(failing)).unwrap();
        assert_eq!(
            read(req).await.unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
    }
}
