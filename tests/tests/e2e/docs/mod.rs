//! The documentation against the product: `docs/REFERENCE.md` and the links, the connector schema
//! and `docs/examples/`.

mod example_releases;
mod reference;
