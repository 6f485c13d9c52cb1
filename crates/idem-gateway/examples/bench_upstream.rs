//! A minimal upstream for the gateway benchmark: `POST /orders` answers 201 with a small JSON
//! body at once. `cargo run --release -p idem-gateway --example bench_upstream -- 127.0.0.1:7401`

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:7401".into());
    let app = Router::new().route(
        "/orders",
        post(|body: String| async move {
            (
                StatusCode::CREATED,
                [("content-type", "application/json")],
                format!("{{\"order_id\":1,\"bytes\":{}}}", body.len()),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("bench upstream on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
