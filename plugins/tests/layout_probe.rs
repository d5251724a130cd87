//! The seed's probe: rewrite from a reset through the request where the new head fills, in
//! units of R (the request at the reset), at budgets 30,000 and 100,000. Target: at most
//! 1.0R for every strategy we ship. Prints a table (run with `--nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foldwire_plugins::layout::{
    HeadFill, HeadFirst, HeadFirstConfig, MoveHead, StoreOrderFill, StoreOrderFillConfig,
};
use foldwire_test_kit::probe::run;

#[test]
fn the_seed_probe_stays_within_one_r() {
    let on_fill = StoreOrderFill::new(StoreOrderFillConfig {
        move_head: MoveHead::OnFill,
    });
    let filling_head_first = HeadFirst::new(HeadFirstConfig {
        fill: HeadFill::Fill,
    });
    // 90 requests after the fill reach the stand-in kernel's next fold at 30,000.
    for (budget, extra) in [(30_000u64, 90), (100_000, 5)] {
        let default = run(&StoreOrderFill::default(), budget, extra);
        let eager = run(&on_fill, budget, extra);
        let head_first = run(&HeadFirst::default(), budget, extra);
        let head_first_fill = run(&filling_head_first, budget, extra);
        for (name, p) in [
            ("store_order_fill", &default),
            ("store_order_fill(move_head=on_fill)", &eager),
            ("head_first", &head_first),
            ("head_first(fill=fill)", &head_first_fill),
        ] {
            println!(
                "TABLE {name} | budget {} | R {} | head full at request {} | {:.2}R ({:.2}R counting appends) | +{extra} requests: {:.2}R, head first from request {:?}, folds {}",
                p.budget,
                p.r,
                p.fill_requests,
                p.ratio(),
                p.ratio_with_appends(),
                p.extended_ratio(),
                p.moved_at,
                p.folds_after_reset
            );
        }
        assert_eq!(
            default.fill_requests, 5,
            "the head holds the transition and three messages"
        );
        assert_eq!(head_first.fill_requests, 1, "sealed at the reset's request");
        // Both shipped defaults are within the target.
        assert!(head_first.ratio() <= 1.0, "{head_first:?}");
        assert!(
            head_first.ratio() > 0.99,
            "the reset's request is rewritten whole, once: {head_first:?}"
        );
        // The default ships within the target, counting appends or not.
        assert!(default.ratio() <= 1.0, "{default:?}");
        assert!(default.ratio_with_appends() <= 1.0, "{default:?}");
        assert_eq!(
            default.rewritten, 0,
            "filling and the full head in store order only append"
        );
        // Moving at the fill rewrites the whole request once; a head filling at the front
        // rewrites everything behind it on every message.
        assert!(eager.ratio() > 1.0 && eager.ratio() < 1.1, "{eager:?}");
        assert!(head_first_fill.ratio() > 3.5, "{head_first_fill:?}");
        // Over the longer run the deferred move never costs more than moving at the fill.
        assert!(
            default.extended_rewritten <= eager.extended_rewritten,
            "{default:?} vs {eager:?}"
        );
        if budget == 30_000 {
            assert!(
                default.folds_after_reset > 0 && default.moved_at.is_some(),
                "the move rode on a fold: {default:?}"
            );
        }
    }
}
