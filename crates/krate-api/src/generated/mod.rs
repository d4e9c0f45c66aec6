pub mod resources;
pub mod shape;
