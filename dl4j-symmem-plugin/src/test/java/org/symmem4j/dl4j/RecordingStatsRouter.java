package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.deeplearning4j.core.storage.Persistable;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.core.storage.StorageMetaData;
import org.deeplearning4j.ui.model.storage.InMemoryStatsStorage;

/** Forwards to DL4J's in-memory storage and keeps every update (the storage keys updates by millisecond). */
public final class RecordingStatsRouter implements StatsStorageRouter {
    public final InMemoryStatsStorage storage = new InMemoryStatsStorage();
    public final List<Persistable> updates = new ArrayList<>();

    @Override
    public void putStorageMetaData(StorageMetaData storageMetaData) {
        storage.putStorageMetaData(storageMetaData);
    }

    @Override
    public void putStorageMetaData(Collection<? extends StorageMetaData> storageMetaData) {
        storage.putStorageMetaData(storageMetaData);
    }

    @Override
    public void putStaticInfo(Persistable staticInfo) {
        storage.putStaticInfo(staticInfo);
    }

    @Override
    public void putStaticInfo(Collection<? extends Persistable> staticInfo) {
        storage.putStaticInfo(staticInfo);
    }

    @Override
    public void putUpdate(Persistable update) {
        updates.add(update);
        storage.putUpdate(update);
    }

    @Override
    public void putUpdate(Collection<? extends Persistable> updates) {
        updates.forEach(this::putUpdate);
    }
}
