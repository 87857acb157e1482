use lapilli_core::*;

#[test]
fn append_read_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { segment_size: 4096, durability: Durability::Buffered, ..Options::default() };
    {
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        for i in 0..200u32 {
            let r = store.append(vec![Event::new("T", [format!("e:{}", i % 7)], i.to_le_bytes().to_vec())], None).unwrap();
            assert_eq!(r.first.get(), i as u64 + 1);
        }
        let got = store.read(&Query::for_tags(["e:3"]), ReadOptions::default()).unwrap().collect_all().unwrap();
        assert_eq!(got.len(), 29);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), opts).unwrap();
    assert_eq!(store.head().unwrap().get(), 200);
    assert!(store.recovery().segments >= 2, "{:?}", store.recovery());
    let got = store.read(&Query::all(), ReadOptions { backwards: true, limit: Some(3), ..Default::default() }).unwrap().collect_all().unwrap();
    assert_eq!(got.iter().map(|e| e.position.get()).collect::<Vec<_>>(), vec![200, 199, 198]);
}
