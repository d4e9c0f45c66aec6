pub mod protobuf;
pub mod resources;
pub mod schema;
pub mod shape;
