//! Errors as RFC 9457 `application/problem+json`: a `type` URI per kind of problem, the
//! HTTP status, a one-line `title`, a `detail` that says what and what to do, and — where
//! one field of the request is at fault — `field`, naming it (`params.timeout`, `cursor`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use takt_core::store::{StoreError, StoreErrorKind};
use utoipa::ToSchema;

use crate::scheduler::SchedulerError;

/// The media type of every error response.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One problem (RFC 9457), as the API answers it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Problem {
    /// `urn:takt:problem:<kind>`: invalid-field, unauthorized, forbidden, not-found,
    /// conflict, stale-version, precondition-required, too-many-requests, unavailable,
    /// internal, no-route, method-not-allowed.
    #[serde(rename = "type", serialize_with = "urn")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    /// The kind in words.
    #[schema(value_type = String)]
    pub title: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// What is wrong and what to do.
    pub detail: String,
    /// The request field at fault (a body path such as `params.url`, a query parameter, a
    /// header), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Headers to send with it (`WWW-Authenticate`, `Retry-After`); not in the body.
    #[serde(skip)]
    #[schema(ignore)]
    pub headers: Vec<(header::HeaderName, String)>,
}

impl Problem {
    /// A problem of `kind` with `status`, `title` and `detail`.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            kind,
            title,
            status: status.as_u16(),
            detail: detail.into(),
            field: None,
            headers: Vec::new(),
        }
    }

    /// 400: the request's `field` is invalid.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Problem {
        Problem {
            field: Some(field.into()),
            ..Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-field",
                "a request field is invalid",
                detail,
            )
        }
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "not found", detail)
    }

    /// 409.
    pub fn conflict(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::CONFLICT, "conflict", "conflict", detail)
    }

    /// 403.
    pub fn forbidden(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::FORBIDDEN, "forbidden", "forbidden", detail)
    }

    /// 500 for a failure that is not the caller's.
    pub fn internal(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
            detail,
        )
    }

    /// The same problem naming `field`.
    pub fn at(mut self, field: impl Into<String>) -> Problem {
        self.field = Some(field.into());
        self
    }

    /// The same problem with a response header.
    pub fn header(mut self, name: header::HeaderName, value: impl Into<String>) -> Problem {
        self.headers.push((name, value.into()));
        self
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Problem {
        let detail = e.to_string();
        match e.kind() {
            StoreErrorKind::NotFound => Problem::not_found(detail),
            StoreErrorKind::Conflict => Problem::conflict(detail),
            StoreErrorKind::Invalid => Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-field",
                "the store refused the request",
                detail,
            ),
            StoreErrorKind::Transient => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is unavailable",
                format!("{detail}; retry later"),
            )
            .header(header::RETRY_AFTER, "5"),
            _ => Problem::internal(detail),
        }
    }
}

impl From<SchedulerError> for Problem {
    fn from(e: SchedulerError) -> Problem {
        match e {
            SchedulerError::Store(s) => s.into(),
            SchedulerError::JobNotFound(_) => Problem::not_found(e.to_string()),
            SchedulerError::Job(_) | SchedulerError::NoId(_) => Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-field",
                "the job is invalid",
                e.to_string(),
            ),
            other => Problem::internal(other.to_string()),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        for (name, value) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name.clone(), v);
            }
        }
        response
    }
}

/// `type` as a URN: `urn:takt:problem:<kind>`.
fn urn<S: serde::Serializer>(kind: &&'static str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("urn:takt:problem:{kind}"))
}

/// What a handler returns: its answer, or a problem.
pub type ApiResult<T> = Result<T, Problem>;
