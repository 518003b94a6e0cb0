//! Seeded generators of sparse test data.
