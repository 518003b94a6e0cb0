//! File formats: Matrix Market, FROSTT `.tns` and `.npy`.
