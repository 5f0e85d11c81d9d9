//! The relay's unit tests: the lanes it is woken for, the pipeline and its drains against
//! mock ports (`fixtures`).

mod lanes_interest {
    use super::super::*;

    #[test]
    fn a_relay_is_woken_for_its_own_lanes_only_once_it_holds_some() {
        let interest = LaneInterest::default();
        assert!(interest.wants(&[3]), "before any lease: every notification");
        interest.set(&[HeldLane { lane: 7, epoch: 1 }, HeldLane { lane: 2, epoch: 4 }]);
        assert!(interest.wants(&[7]));
        assert!(interest.wants(&[1, 2]));
        assert!(!interest.wants(&[3, 9]), "another worker's lanes");
        assert!(interest.wants(&[]), "a notification naming no lane (an operator's action)");
        interest.set(&[]);
        assert!(!interest.wants(&[7]), "no lane held: nothing to do for a commit");
    }
}

mod drains;
mod fixtures;
mod pipeline;
