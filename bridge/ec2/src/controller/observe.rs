//! What EC2 shows of an object: the instances tagged with its uid, plus the instances this
//! process launched that EC2 does not list yet (its reads lag its writes), so a pass never
//! launches twice for one index.

use super::super::client::{Ec2, Instance};
use super::{Pass, Result};

impl Pass<'_> {
    /// The instances tagged as this object's, plus launches EC2 does not list yet.
    pub(super) async fn observe(&self, ec2: &dyn Ec2) -> Result<Vec<Instance>> {
        let mut observed = ec2.owned(&self.uid).await?;
        let mut launched = self.ctrl.launched.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mine) = launched.get_mut(&self.uid) {
            mine.retain(|l| !observed.iter().any(|o| o.id == l.id));
            observed.extend(mine.iter().cloned());
            if mine.is_empty() {
                launched.remove(&self.uid);
            }
        }
        Ok(observed)
    }

    /// Counts `instance` as observed until EC2 lists it.
    pub(super) fn remember(&self, instance: &Instance) {
        self.ctrl
            .launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(self.uid.clone())
            .or_default()
            .push(instance.clone());
    }

    /// Drops what [`Self::remember`] kept for this object (it is gone).
    pub(super) fn forget(&self) {
        self.ctrl
            .launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.uid);
    }
}
