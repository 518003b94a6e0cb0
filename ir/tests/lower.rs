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

/// Sgap's strategies become a group on the sink: segment groups along the
/// scatter axis, parallel groups along the innermost reduced axis; where
/// the statement or the tiles cannot have them, the refusal says why and
/// what to change (paper 004's legality rules).
#[test]
fn reduction_strategies_group_the_sink_or_say_why_not() {
    use spindle_ir::kernel::{GroupKind, SinkGroup};
    let groupcoo = declarations(&[
        ("C", &[96, 24], "f32"),
        ("A_grp", &[40], "i32"),
        ("A_val", &[40, 4], "f32"),
        ("A_crd", &[40, 4], "i32"),
        ("B", &[80, 24], "f32"),
    ]);
    let st = parse("C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]").unwrap();
    let einsum = check(&st, &groupcoo).unwrap();
    let lowered = |schedule: &str| lower(&einsum, &schedule.parse().unwrap(), "k");
    let group = |schedule: &str| {
        let k = lowered(schedule).unwrap();
        let SinkGroup { axis, lanes, kind } = k.sink.group.expect(schedule);
        (k.axis(axis).name.clone(), lanes, kind)
    };
    assert_eq!(group("reduce=segment(8) tile.p=16"), ("p".to_string(), 8, GroupKind::Segment));
    assert_eq!(group("reduce=parallel"), ("q".to_string(), 4, GroupKind::Parallel));
    assert_eq!(group("reduce=parallel(2)"), ("q".to_string(), 2, GroupKind::Parallel));
    assert!(lowered("").unwrap().sink.group.is_none());
    // The group's axis and size are in the kernel's text.
    let text = lowered("reduce=segment(8) tile.p=16").unwrap().to_string();
    assert!(text.contains(" segment(8) over p"), "{text}");

    let refused = |schedule: &str| lowered(schedule).unwrap_err();
    let too_wide = refused("reduce=segment(32) tile.p=16");
    assert!(
        too_wide.message.contains("groups 32 elements along `p`, whose tile is 16"),
        "{}",
        too_wide.message
    );
    assert!(too_wide.notes.iter().any(|n| n.contains("tile.p=32")), "{:?}", too_wide.notes);
    let rule_two = refused("reduce=parallel(8)");
    assert!(rule_two.message.contains("one write-back lane"), "{}", rule_two.message);

    let vectors = declarations(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("x", &[12], "f32")]);
    let spmv = check(&parse("y[i] += A[i,k] * x[k]").unwrap(), &vectors).unwrap();
    let owned = lower(&spmv, &"reduce=segment(4)".parse().unwrap(), "k").unwrap_err();
    assert!(owned.message.contains("no subscript of y is"), "{}", owned.message);
    let copy =
        check(&parse("y[i] = x[i] * 2").unwrap(), &declarations(&[("y", &[12], "f32"), ("x", &[12], "f32")]))
            .unwrap();
    let nothing = lower(&copy, &"reduce=parallel".parse().unwrap(), "k").unwrap_err();
    assert!(nothing.message.contains("has none"), "{}", nothing.message);
}
