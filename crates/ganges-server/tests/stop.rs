//! A server stopped by its shutdown future closes every connection, as a crash would look
//! to its clients, instead of leaving them open with nobody serving them.

use ganges_harness::InProcessCluster;
use ganges_net::Transport;
use ganges_proto::io::{read_frame, write_frame};
use ganges_proto::msg::{Hello, Message};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_closes_its_connections() {
    let mut c = InProcessCluster::start(1, None).await.unwrap();
    let addr = c.cluster().servers[0].addr.clone();
    let mut s = Transport::plain().connect(&addr).await.unwrap();
    write_frame(&mut s.wr, &Message::Hello(Hello { client: "t".into(), client_id: 0 }).encode(1)).await.unwrap();
    let (h, body) = read_frame(&mut s.rd).await.unwrap().expect("an answer");
    assert!(matches!(Message::decode(&h, body).unwrap(), Message::HelloOk(_)));
    assert!(c.stop(0).await.is_some_and(|r| r.is_ok()));
    let next = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s.rd)).await;
    match next {
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Ok(Ok(Some(_))) => panic!("a stopped server sent a frame"),
        Err(_) => panic!("the connection stayed open after the server stopped"),
    }
    assert!(Transport::plain().connect(&addr).await.is_err(), "nothing listens any more");
}
