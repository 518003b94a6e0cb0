//! Lowering to the tile path under default schedules.

use spindle_ir::kernel::lower::{MAX_TILE_ELEMENTS, lower};
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::{check, declarations, parse};

#[test]
fn default_tiles_of_many_axes_shrink_until_every_value_fits() {
    // Six axes at their default tiles (16^3 x 4^3) make a product of
    // 262144 elements, past the limit.
    let st = parse("O[i,j,k] = I[i+p,j+q,k+r] * F[p,q,r]").unwrap();
    let decl =
        declarations(&[("O", &[97, 97, 97], "f32"), ("I", &[99, 99, 99], "f32"), ("F", &[3, 3, 3], "f32")]);
    let einsum = check(&st, &decl).unwrap();
    let kernel = lower(&einsum, &Schedule::default(), "conv").unwrap();
    let tiles: usize = kernel.axes.values().map(|a| a.tile).product();
    assert!(tiles <= MAX_TILE_ELEMENTS, "{tiles}");
    // Tiles the schedule names are kept; what they ask for may not fit.
    let named: Schedule = "tile.i=64 tile.j=64 tile.k=64".parse().unwrap();
    let refused = lower(&einsum, &named, "conv").unwrap_err();
    assert!(refused.message.contains("is larger than"), "{}", refused.message);
}
