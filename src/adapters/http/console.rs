//! The operator console at `/console/`: a page over the admin API, its three files built into
//! the binary (no CDN, no download, no backend of its own). It signs in with an admin token
//! kept in the browser tab's sessionStorage; every action goes through the admin API, so it
//! is authorised and audited exactly as a `curl` would be.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

const INDEX: &str = include_str!("../../../console/index.html");
const SCRIPT: &str = include_str!("../../../console/console.js");
const STYLE: &str = include_str!("../../../console/console.css");

/// `/console` is a directory: the page loads its files relative to `/console/`.
pub async fn console_root() -> HttpResponse {
    HttpResponse::PermanentRedirect().insert_header((header::LOCATION, "/console/")).finish()
}

/// The console's files; anything else under `/console/` is 404.
pub async fn console(path: web::Path<String>) -> HttpResponse {
    let (body, content_type) = match path.as_str() {
        "" | "index.html" => (INDEX, "text/html; charset=utf-8"),
        "console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return HttpResponse::NotFound().finish(),
    };
    HttpResponse::Ok()
        .content_type(content_type)
        // Only its own files; never framed (the page holds an admin token).
        .insert_header(("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}
